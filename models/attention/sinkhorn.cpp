#include "models/attention/sinkhorn.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/error.h"
#include "engine/rng.h"
#include "ops/binary.h"
#include "ops/cumsum.h"
#include "ops/index.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/select.h"
#include "ops/softmax.h"
#include "ops/unary.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(sinkhorn, "sinkhorn",
                       "Sparse Sinkhorn attention (Tay et al. 2020): a learned sorting network and Sinkhorn "
                       "normalisation sort key blocks; local + sorted block, SortCut, O(N*block), causal or not",
                       [](const AttentionConfig& c) { return std::make_unique<SinkhornAttention>(c); },
                       {{"block", "4"}});  // the sweep's 16 positions in 4 blocks: its step sorts blocks

namespace {

// The variant's own Philox key, so that the sorting network never reuses the words of the model's generator.
constexpr uint64_t kStream = 0x73696e6b'686f726eull;  // "sinkhorn"

double inf() { return std::numeric_limits<double>::infinity(); }

}  // namespace

SinkhornAttention::SinkhornAttention(const AttentionConfig& config)
    : heads_(config.heads),
      head_dim_(config.head_dim),
      max_len_(config.max_len),
      block_(config.options.get_int("block", 64, IntRange::at_least(1))),
      iters_(config.options.get_int("iters", 5, IntRange::at_least(1))),
      sortcut_(config.options.get_int("sortcut", 0, IntRange::at_least(0))),  // 0: off
      temperature_(config.options.get_double("temperature", 0.75, RealRange::above(0))),
      causal_(config.causal) {
  ENG_CHECK(max_len_ >= 1, "attention 'sinkhorn': needs AttentionConfig::max_len >= 1 (the sorting network has one "
            "output per block), got ", max_len_);
  ENG_CHECK(heads_ >= 1 && head_dim_ >= 1, "attention 'sinkhorn': needs heads >= 1 and head_dim >= 1, got ", heads_,
            " and ", head_dim_);
  const int64_t nb_max = (max_len_ + block_ - 1) / block_;
  ENG_CHECK(sortcut_ <= nb_max, "attention 'sinkhorn': option sortcut = ", sortcut_, " exceeds the ", nb_max,
            " blocks of max_len ", max_len_);
  accepts_.causal = sortcut_ == 0;
  accepts_.grouped_step = true;
  accepts_.why_not = sortcut_ == 0 ? "sorted keys are mixtures of positions, and query block i is paired with key "
                                     "block i of one sequence"
                                   : "sorted keys are mixtures of positions, query block i is paired with key block i "
                                     "of one sequence, and SortCut reads the first sorted blocks, drawn from all of it";
  Rng rng(config.seed ^ kStream);
  w_ = register_parameter("sort_net", mul_scalar(randn({heads_, head_dim_, nb_max}, rng, DType::F64),
                                                 1.0 / std::sqrt(double(head_dim_))));
}

Tensor SinkhornAttention::padded(const Tensor& x, const AttentionMask& mask) const {
  const int64_t B = x.size(0), H = x.size(1), N = x.size(2), F = x.size(3), c = block(N);
  const int64_t Np = (N + c - 1) / c * c;
  Tensor out = Np > N ? concat({x, zeros({B, H, Np - N, F}, x.dtype())}, 2) : x;
  if (mask.key_lengths.empty()) return out;
  // masked_fill writes the zeros without reading the padded entries: even inf cannot leak in, and no gradient
  // flows to them.
  std::vector<double> pad(size_t(B * Np), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = mask.key_lengths[size_t(b)]; j < Np; ++j) pad[size_t(b * Np + j)] = 1;
  return masked_fill(out, from_vector(pad, {B, 1, Np, 1}, DType::I64), 0.0);
}

Tensor SinkhornAttention::sinkhorn(const Tensor& keys, int64_t c, bool causal) const {
  const int64_t B = keys.size(0), H = keys.size(1), D = keys.size(3), nb = keys.size(2) / c;
  Tensor summary = sum(reshape(keys, {B, H, nb, c, D}), {3});  // [B, H, nb, D]: ψ_P, sum pooling
  if (causal)  // row i summarises the blocks before i only: a shifted cumulative sum, nothing of block i
    summary = concat({zeros({B, H, 1, D}, keys.dtype()), narrow(cumsum(summary, 2), 2, 0, nb - 1)}, 2);
  Tensor x = mul_scalar(matmul(summary, narrow(w_, 2, 0, nb).to(keys.dtype())), 1.0 / temperature_);  // R / τ, [B, H, nb, nb]
  if (!causal) {
    for (int64_t it = 0; it < iters_; ++it) x = log_softmax(log_softmax(x, -1), -2);  // F_r, then F_c
    return exp(x);
  }
  // Causal balancing. Entry (i, j) exists for j < i only; row 0 has none, so its log_softmax stays −inf (zeros
  // in P, no NaN). The column step of row i normalises over the rows i' in (j, i], which are all the rows i' <= i
  // because the others hold −inf in column j: a running log-sum-exp down each column. Where j >= i the
  // difference is −inf − (−inf); those entries are set back to −inf (and pass no gradient).
  std::vector<double> upper(size_t(nb * nb), 0.0);
  for (int64_t i = 0; i < nb; ++i)
    for (int64_t j = i; j < nb; ++j) upper[size_t(i * nb + j)] = 1;
  const Tensor up = from_vector(upper, {nb, nb}, DType::I64);
  x = masked_fill(x, up, -inf());
  for (int64_t it = 0; it < iters_; ++it) {
    x = log_softmax(x, -1);
    x = masked_fill(sub(x, logcumsumexp(x, -2)), up, -inf());
  }
  return exp(x);
}

Tensor SinkhornAttention::sorting_matrix(const Tensor& k, const AttentionMask& mask) const {
  ENG_CHECK(k.dim() == 4 && k.size(1) == heads_ && k.size(3) == head_dim_ && k.size(2) >= 1,
            "attention 'sinkhorn' sorting_matrix: k must be [B, ", heads_, ", N >= 1, ", head_dim_, "], got ",
            k.shape());
  ENG_CHECK(k.size(2) <= max_len_, "attention 'sinkhorn' sorting_matrix: k ", k.shape(), " has ", k.size(2),
            " positions, more than max_len ", max_len_, " that the sorting network was built for");
  return sinkhorn(padded(k, mask), block(k.size(2)), mask.causal);
}

Tensor SinkhornAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3), Dv = v.size(3);
  check_attention_mask(mask, B, H, N, N, q.dtype(), "attention 'sinkhorn'");
  ENG_CHECK(H == heads_ && D == head_dim_, "attention 'sinkhorn': q ", q.shape(), " needs ", heads_, " heads of dim ",
            head_dim_, " (the sorting network is [", heads_, ", ", head_dim_, ", nb])");
  ENG_CHECK(N <= max_len_, "attention 'sinkhorn': q ", q.shape(), " has ", N, " positions, more than max_len ",
            max_len_, " that the sorting network was built for");
  if (N == 0) return mul_scalar(v, 0.0);
  const int64_t c = block(N), nb = (N + c - 1) / c, Np = nb * c;
  ENG_CHECK(sortcut_ <= nb, "attention 'sinkhorn': sortcut = ", sortcut_, " exceeds the ", nb, " blocks of q ",
            q.shape(), " (block ", c, ")");
  const Tensor keys = padded(k, mask), values = padded(v, mask);
  const Tensor p = sinkhorn(keys, c, mask.causal);  // [B, H, nb, nb]
  auto blocks = [&](const Tensor& x) { return reshape(x, {B, H, nb, c, x.size(3)}); };
  auto sorted = [&](const Tensor& x) {  // ψ_S(X)_i = Σ_j P_ij X_j over whole blocks
    const int64_t F = x.size(3);
    return reshape(matmul(p, reshape(x, {B, H, nb, c * F})), {B, H, nb, c, F});
  };
  const Tensor qb = blocks(Np > N ? concat({q, zeros({B, H, Np - N, D}, q.dtype())}, 2) : q);

  // The additive term (0 or −inf), per batch element (every head sees the same keys). A local key is hidden by
  // causality and padding (internal padding counts as padding); a sorted slot t is hidden when it is padding in
  // every block the row draws from: t >= the key length (block 0 holds the lowest positions), or no block at all.
  const int64_t W = sortcut_ > 0 ? sortcut_ * c : 2 * c;
  std::vector<double> bias(size_t(B * nb * c * W), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = mask.key_lengths.empty() ? N : mask.key_lengths[size_t(b)];
    for (int64_t blk = 0; blk < nb; ++blk)
      for (int64_t r = 0; r < c; ++r) {
        double* row = &bias[size_t(((b * nb + blk) * c + r) * W)];
        if (sortcut_ > 0) {
          for (int64_t e = 0; e < W; ++e)
            if (e % c >= len) row[e] = -inf();
          continue;
        }
        const int64_t end = attention_key_end(mask, b, blk * c + r, N);
        for (int64_t t = 0; t < c; ++t) {
          if (blk * c + t >= end) row[t] = -inf();
          if (t >= len || (mask.causal && blk == 0)) row[c + t] = -inf();
        }
      }
  }
  const Tensor bias_t = from_vector(bias, {B, 1, nb, c, W}, q.dtype());
  Tensor kk, vv;
  if (sortcut_ > 0) {
    kk = reshape(narrow(sorted(keys), 2, 0, sortcut_), {B, H, 1, W, D});
    vv = reshape(narrow(sorted(values), 2, 0, sortcut_), {B, H, 1, W, Dv});
  } else {
    kk = concat({blocks(keys), sorted(keys)}, 3);
    vv = concat({blocks(values), sorted(values)}, 3);
  }
  Tensor logits = mul_scalar(matmul(qb, transpose(kk, -2, -1)), 1.0 / std::sqrt(double(D)));
  const Tensor out = matmul(softmax(add(logits, bias_t), -1), vv);  // [B, H, nb, c, Dv]
  return narrow(reshape(out, {B, H, Np, Dv}), 2, 0, N);
}

}  // namespace eng
