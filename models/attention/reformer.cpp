#include "models/attention/reformer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/error.h"
#include "engine/rng.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/select.h"
#include "ops/softmax.h"
#include "ops/unary.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION("reformer",
                       "Reformer LSH attention (Kitaev et al. 2020): shared QK, random-rotation hashes, sorted chunks "
                       "with one chunk of look-back, O(N*chunk), causal or not",
                       [](const AttentionConfig& c) { return std::make_unique<ReformerAttention>(c); });

namespace {

// The variant's own Philox key, so that the rotations never reuse the words of the model's generator Rng(seed),
// which initialises the weights; draw d starts at word d·2^32 of it.
constexpr uint64_t kStream = 0x7265666f'726d6572ull;  // "reformer"
constexpr int kDrawShift = 32;
// The own-key logit (10^5 in Eq. 9 and trax): finite, so a token with no other visible key attends to itself, and
// far enough below any real logit (|q_i·k_j|/√D ≤ |q_i|/√D) that it gets weight e^-1e5 = 0 otherwise.
constexpr double kSelfLogit = -1e5;
// k = q / sqrt(|q|² + eps): a zero query gets a zero key (and a finite gradient) instead of 0/0; any other key
// moves by a relative 5e-13 at most for |q| >= 1.
constexpr double kNormEps = 1e-12;

std::vector<double> as_doubles(const std::vector<int64_t>& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace

ReformerAttention::ReformerAttention(const AttentionConfig& config)
    : nb_(config.options.get_int("buckets", 32)),
      rounds_(config.options.get_int("rounds", 1)),
      chunk_(config.options.get_int("chunk", 64)),
      dedup_(config.options.get_bool("dedup", false)),
      seed_(config.seed) {
  const std::string redraw = config.options.get_string("redraw", "every-call");
  ENG_CHECK(redraw == "every-call" || redraw == "fixed",
            "attention 'reformer': option redraw must be every-call or fixed, got '", redraw, "'");
  fixed_ = redraw == "fixed";
  ENG_CHECK(nb_ >= 2 && nb_ % 2 == 0,
            "attention 'reformer': option buckets must be even and >= 2 (argmax over [xR; -xR] has two buckets per "
            "column of R), got ",
            nb_);
  ENG_CHECK(rounds_ >= 1, "attention 'reformer': option rounds must be >= 1, got ", rounds_);
  ENG_CHECK(chunk_ >= 1, "attention 'reformer': option chunk must be >= 1, got ", chunk_);
  calls_ = register_buffer("hash_calls", zeros({1}, DType::I64));
}

void ReformerAttention::set_call(int64_t call) {
  ENG_CHECK(call >= 0, "attention 'reformer': set_call needs a call index >= 0, got ", call);
  calls_.data<int64_t>()[0] = call;
}

Tensor ReformerAttention::rotations(int64_t call, int64_t head_dim) const {
  const int64_t half = nb_ / 2, words = 2 * rounds_ * head_dim * half;  // every normal takes two words
  ENG_CHECK(call >= 0 && call < (int64_t(1) << kDrawShift), "reformer rotations: call index ", call,
            " is outside [0, 2^32)");
  ENG_CHECK(head_dim >= 1 && words < (int64_t(1) << kDrawShift), "reformer rotations: ", rounds_, " rounds of ",
            head_dim, " x ", half, " rotations need more random words than one draw holds");
  const uint64_t draw = fixed_ ? 0 : uint64_t(call);
  Rng rng(seed_ ^ kStream, draw << kDrawShift);
  std::vector<double> r(size_t(rounds_ * head_dim * half));
  for (double& x : r) x = rng.normal();
  return from_vector(r, {rounds_, head_dim, half}, DType::F64);
}

// h(x) = argmax([xR; −xR]) in double, the first maximum on ties; bucket b < nb/2 is column b of xR, b >= nb/2 is
// column b − nb/2 of −xR.
std::vector<int64_t> ReformerAttention::hash(const Tensor& q, int64_t call) const {
  const int64_t rows = q.size(0) * q.size(1) * q.size(2), D = q.size(3), half = nb_ / 2;
  const std::vector<double> rot = rotations(call, D).to_vector(), x = q.to_vector();
  std::vector<int64_t> out(size_t(rounds_ * rows));
  std::vector<double> proj(static_cast<size_t>(half));
  for (int64_t r = 0; r < rounds_; ++r)
    for (int64_t n = 0; n < rows; ++n) {
      for (int64_t c = 0; c < half; ++c) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += x[size_t(n * D + d)] * rot[size_t((r * D + d) * half + c)];
        proj[size_t(c)] = s;
      }
      int64_t best = 0;
      for (int64_t b = 1; b < nb_; ++b) {
        const double cand = b < half ? proj[size_t(b)] : -proj[size_t(b - half)];
        const double top = best < half ? proj[size_t(best)] : -proj[size_t(best - half)];
        if (cand > top) best = b;
      }
      out[size_t(r * rows + n)] = best;
    }
  return out;
}

Tensor ReformerAttention::buckets(const Tensor& q, int64_t call) const {
  ENG_CHECK(q.dim() == 4, "reformer buckets: q must be [B, H, N, D], got ", q.shape());
  return from_vector(as_doubles(hash(q, call)), {rounds_, q.size(0), q.size(1), q.size(2)}, DType::I64);
}

Tensor ReformerAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  check_qkv(q, k, v, "reformer attention");
  ENG_CHECK(q.size(2) == k.size(2),
            "reformer attention: self-attention only (the keys are the normalised queries), got q ", q.shape(),
            " and k ", k.shape());
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3), Dv = v.size(3);
  check_attention_mask(mask, B, H, N, N, q.dtype(), "reformer attention");
  ENG_CHECK(!mask.keep.defined() && !mask.bias.defined() && !mask.alibi_slopes.defined(),
            "reformer attention: keep, bias and ALiBi masks are not supported (logits exist only inside the sorted "
            "chunks); only causal and key_lengths are (q ",
            q.shape(), ", k ", k.shape(), ")");
  ENG_CHECK(!mask.causal || mask.query_offset == 0,
            "reformer attention: causal masking needs query_offset 0 (no KV cache: the queries are the keys), got ",
            mask.query_offset, " for q ", q.shape());
  const int64_t call_index = call();
  if (training()) calls_.data<int64_t>()[0] = call_index + 1;  // counted only once every check has passed
  if (N == 0) return mul_scalar(v, 0.0);
  const std::vector<int64_t> bucket = hash(q, call_index);

  // Geometry: R rounds of nc chunks of c sorted slots; the last chunk is padded with empty slots up to Np = nc·c.
  // One chunk has no previous chunk (it would be itself), so each query then sees W = c keys, else 2c.
  const int64_t R = rounds_, BH = B * H, c = std::min(chunk_, N), nc = (N + c - 1) / c, Np = nc * c;
  const int64_t W = nc > 1 ? 2 * c : c;
  std::vector<int64_t> order(size_t(BH * R * Np), -1), slot(size_t(BH * R * N)), perm(static_cast<size_t>(N));
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t* bk = &bucket[size_t((r * BH + bh) * N)];
      std::iota(perm.begin(), perm.end(), int64_t(0));
      std::stable_sort(perm.begin(), perm.end(), [bk](int64_t a, int64_t b) { return bk[a] < bk[b]; });
      const int64_t base = bh * R + r;
      for (int64_t s = 0; s < N; ++s) {
        order[size_t(base * Np + s)] = perm[size_t(s)];
        slot[size_t(base * N + perm[size_t(s)])] = s;
      }
    }
  auto prev_chunk = [nc](int64_t ch) { return (ch + nc - 1) % nc; };
  // Rounds in which query i of (b, h) has key j in its own or previous chunk: N_ij of Eq. 10.
  auto seen = [&](int64_t bh, int64_t i, int64_t j) {
    int64_t n = 0;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t ci = slot[size_t((bh * R + r) * N + i)] / c, cj = slot[size_t((bh * R + r) * N + j)] / c;
      n += cj == ci || (nc > 1 && cj == prev_chunk(ci));
    }
    return n;
  };

  // Constants over the chunked logits [B, H, R, nc, c, W]: the own-key entries, the additive term (−inf for hidden
  // keys, −log N_ij with dedup), and the rows with no visible key (padding slots, and queries whose two chunks hold
  // only hidden keys, e.g. every query of a batch element of length 0).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> self(size_t(BH * R * Np * W), 0.0), bias(self.size(), 0.0), empty(size_t(BH * R * Np), 0.0);
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t base = bh * R + r;
      for (int64_t s = 0; s < Np; ++s) {
        const int64_t i = order[size_t(base * Np + s)], ch = s / c;
        const int64_t end = i < 0 ? 0 : attention_key_end(mask, bh / H, i, N);
        bool any = false;
        for (int64_t w = 0; w < W; ++w) {
          const int64_t j = order[size_t(base * Np + (w < c ? ch : prev_chunk(ch)) * c + w % c)];
          const size_t e = size_t((base * Np + s) * W + w);
          if (j < 0 || j >= end) {
            bias[e] = -inf;
            continue;
          }
          any = true;
          if (j == i)
            self[e] = 1;
          else if (dedup_ && R > 1)
            bias[e] = -std::log(double(seen(bh, i, j)));
        }
        if (!any) empty[size_t(base * Np + s)] = 1;
      }
    }
  const DType dt = q.dtype();
  const Tensor self_t = from_vector(self, {B, H, R, nc, c, W}, dt), bias_t = from_vector(bias, {B, H, R, nc, c, W}, dt);
  const Tensor empty_t = from_vector(empty, {B, H, R, nc, c, 1}, dt);

  std::vector<int64_t> gather_idx(size_t(BH * R * Np)), unsort_idx(size_t(BH * R * N));
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t base = bh * R + r;
      for (int64_t s = 0; s < Np; ++s)  // padding slots read position 0; every logit they take part in is hidden
        gather_idx[size_t(base * Np + s)] = bh * N + std::max<int64_t>(order[size_t(base * Np + s)], 0);
      for (int64_t i = 0; i < N; ++i) unsort_idx[size_t(base * N + i)] = base * Np + slot[size_t(base * N + i)];
    }
  const Tensor gidx = from_vector(as_doubles(gather_idx), {BH * R * Np}, DType::I64);
  const Tensor uidx = from_vector(as_doubles(unsort_idx), {BH * R * N}, DType::I64);

  // Rows of x [B, H, N, F] in sorted order: [B, H, R, nc, c, F].
  auto sorted = [&](const Tensor& x) {
    const int64_t F = x.size(3);
    return reshape(index_select(reshape(x, {BH * N, F}), 0, gidx), {B, H, R, nc, c, F});
  };
  const Tensor keys = mul(q, rsqrt(add_scalar(sum(mul(q, q), {3}, true), kNormEps)));  // shared QK
  const Tensor sq = sorted(q);
  Tensor sk = sorted(keys), sv = sorted(v);
  if (nc > 1) {  // look one chunk back, the first chunk to the last
    std::vector<double> prev(static_cast<size_t>(nc));
    for (int64_t ch = 0; ch < nc; ++ch) prev[size_t(ch)] = double(prev_chunk(ch));
    const Tensor pidx = from_vector(prev, {nc}, DType::I64);
    sk = concat({sk, index_select(sk, 3, pidx)}, 4);
    sv = concat({sv, index_select(sv, 3, pidx)}, 4);
  }
  Tensor logits = mul_scalar(matmul(sq, transpose(sk, -2, -1)), 1.0 / std::sqrt(double(D)));
  logits = add(masked_fill(logits, self_t, kSelfLogit), bias_t);
  // z = log Σ_j exp(logit_j) per row, from rows made finite (an empty row would give −inf − −inf); the softmax
  // exp(logit − z) is then exactly 0 on an empty row, and z is set to −inf there for the round weights.
  const Tensor finite = masked_fill(logits, empty_t, 0);
  const Tensor row_max = max(finite, {5}, true).detach();
  const Tensor z = add(row_max, log(sum(exp(sub(finite, row_max)), {5}, true)));
  const Tensor o = matmul(exp(sub(logits, z)), sv);  // [B, H, R, nc, c, Dv]: each round's o_i^(r) (Eq. 8)
  const Tensor zr = masked_fill(z, empty_t, -inf);

  // Back to original positions, then the rounds weighted by exp(z_r − logsumexp_r z_r) (Eq. 7); a query whose
  // rows are all empty gets weights 0 (softmax of an all −inf row) and outputs zeros.
  const Tensor ou = reshape(index_select(reshape(o, {BH * R * Np, Dv}), 0, uidx), {B, H, R, N, Dv});
  const Tensor zu = reshape(index_select(reshape(zr, {BH * R * Np, 1}), 0, uidx), {B, H, R, N, 1});
  return sum(mul(softmax(zu, 2), ou), {2});
}

}  // namespace eng
