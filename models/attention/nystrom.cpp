#include "models/attention/nystrom.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

ENG_REGISTER_ATTENTION(nystrom, "nystrom",
                       "Nystromformer (Xiong et al. 2021): segment-mean landmarks, F~ pinv(A~) B~ V with an iterative "
                       "pseudo-inverse, optional conv skip; O(n m), non-causal",
                       [](const AttentionConfig& c) { return std::make_unique<NystromAttention>(c); });

namespace {

// The Nyströmformer's own Philox key, so that the conv kernels never reuse the words of the model's generator.
constexpr uint64_t kStream = 0x6e797374'726f6d00ull;  // "nystrom"

// [m, n] averaging matrix: row s holds 1/|segment s| over segment s, the first n mod m segments one longer.
Tensor segment_means(int64_t n, int64_t m, DType dtype) {
  std::vector<double> p(size_t(m * n), 0.0);
  const int64_t base = n / m, longer = n % m;
  int64_t start = 0;
  for (int64_t s = 0; s < m; ++s) {
    const int64_t size = base + (s < longer ? 1 : 0);
    for (int64_t j = start; j < start + size; ++j) p[size_t(s * n + j)] = 1.0 / double(size);
    start += size;
  }
  return from_vector(p, {m, n}, dtype);
}

Tensor identity(int64_t m, DType dtype) {
  std::vector<double> eye(size_t(m * m), 0.0);
  for (int64_t i = 0; i < m; ++i) eye[size_t(i * m + i)] = 1;
  return from_vector(eye, {m, m}, dtype);
}

}  // namespace

Tensor nystrom_pinv(const Tensor& a, int64_t iters) {
  ENG_CHECK(a.dim() >= 2 && a.size(-1) == a.size(-2), "nystrom_pinv: needs square matrices [..., m, m], got ",
            a.shape());
  // ‖a‖₁ ‖a‖∞ bounds σ_max², so that the first residual I − a Z_0 has spectral radius < 1
  // (for a of full rank; the condition under which the iteration converges).
  const Tensor mag = abs(a);
  const Tensor norm1 = max(sum(mag, {-2}, true), {-1}, true);     // largest column sum, [..., 1, 1]
  const Tensor norm_inf = max(sum(mag, {-1}, true), {-2}, true);  // largest row sum (1 for a softmax)
  Tensor z = div(transpose(a, -2, -1), mul(norm1, norm_inf));
  const Tensor eye = identity(a.size(-1), a.dtype());
  const Tensor eye7 = mul_scalar(eye, 7), eye13 = mul_scalar(eye, 13), eye15 = mul_scalar(eye, 15);
  for (int64_t j = 0; j < iters; ++j) {
    const Tensor az = matmul(a, z);
    z = mul_scalar(matmul(z, sub(eye13, matmul(az, sub(eye15, matmul(az, sub(eye7, az)))))), 0.25);
  }
  return z;
}

NystromAttention::NystromAttention(const AttentionConfig& config)
    : heads_(config.heads),
      m_(config.options.get_int("landmarks", 64, IntRange::at_least(1))),
      iters_(config.options.get_int("iters", 6, IntRange::at_least(0))),
      conv_width_(config.options.get_int("conv", 0, IntRange::at_least(0))) {
  ENG_CHECK(conv_width_ == 0 || conv_width_ % 2 == 1,
            "attention 'nystrom': option conv must be 0 (off) or an odd kernel width, got ", conv_width_);
  accepts_.causal = false;
  accepts_.cross = conv_width_ == 0;  // the conv skip adds value i to query i
  accepts_.why_not = conv_width_ == 0 ? "every landmark mixes future positions, and it forms no (query, key) logits"
                                      : "every landmark mixes future positions, it forms no (query, key) logits, and "
                                        "its conv skip adds value i to query i";
  if (conv_width_ > 0) {
    Rng rng(config.seed ^ kStream);
    const double bound = 1.0 / std::sqrt(double(conv_width_));
    conv_ = register_parameter("conv", rand({heads_, conv_width_}, rng, DType::F32, -bound, bound));
  }
}

// The approximation for q [B', H, Lq, D] over all of k, v [B', H, n, ·] (n >= 1, Lq >= 1).
Tensor NystromAttention::approximate(const Tensor& q, const Tensor& k, const Tensor& v) const {
  const int64_t Lq = q.size(2), n = k.size(2), m = std::min({m_, Lq, n});
  const double s = 1.0 / std::sqrt(double(q.size(3)));
  const Tensor q_land = matmul(segment_means(Lq, m, q.dtype()), q);  // Q̃ [B', H, m, D]
  const Tensor k_land = matmul(segment_means(n, m, q.dtype()), k);   // K̃ [B', H, m, D]
  const Tensor f = softmax(mul_scalar(matmul(q, transpose(k_land, 2, 3)), s), -1);       // F̃ [.., Lq, m]
  const Tensor a = softmax(mul_scalar(matmul(q_land, transpose(k_land, 2, 3)), s), -1);  // Ã  [.., m, m]
  const Tensor b = softmax(mul_scalar(matmul(q_land, transpose(k, 2, 3)), s), -1);       // B̃  [.., m, n]
  return matmul(f, matmul(nystrom_pinv(a, iters_), matmul(b, v)));  // right to left: never Lq × n
}

Tensor NystromAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), n = k.size(2), Dv = v.size(3);
  check_attention_mask(mask, B, H, Lq, n, q.dtype(), "attention 'nystrom'");
  ENG_CHECK(conv_width_ == 0 || H == heads_, "attention 'nystrom': the conv skip (conv = ", conv_width_, ") needs ",
            heads_, " heads, got q ", q.shape());
  Tensor out;
  if (Lq == 0 || n == 0) {
    out = zeros({B, H, Lq, Dv}, q.dtype());
  } else if (mask.key_lengths.empty()) {
    out = approximate(q, k, v);
  } else {
    // Each batch element on its real keys only: padded keys are never read, so nothing they hold reaches the
    // output, and the landmark count may differ per element (m clamped to n_b).
    std::vector<Tensor> rows;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t nb = mask.key_lengths[size_t(b)];
      const Tensor qb = narrow(q, 0, b, 1);
      rows.push_back(nb == 0 ? zeros({1, H, Lq, Dv}, q.dtype())
                             : approximate(qb, narrow(narrow(k, 0, b, 1), 2, 0, nb),
                                           narrow(narrow(v, 0, b, 1), 2, 0, nb)));
    }
    out = concat(rows, 0);
  }
  if (conv_width_ == 0) return out;
  // Depth-wise convolution of V along the sequence, zero padded; padded values count as that zero padding.
  Tensor values = v;
  if (!mask.key_lengths.empty()) {
    std::vector<double> is_pad(size_t(B * n), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = mask.key_lengths[size_t(b)]; j < n; ++j) is_pad[size_t(b * n + j)] = 1;
    values = masked_fill(v, from_vector(is_pad, {B, 1, n, 1}, DType::I64), 0.0);
  }
  const Tensor edge = zeros({B, H, conv_width_ / 2, Dv}, v.dtype());
  const Tensor padded = concat({edge, values, edge}, 2);  // [B, H, n + K - 1, Dv]
  const Tensor w = conv_.to(q.dtype());
  for (int64_t t = 0; t < conv_width_; ++t)
    out = add(out, mul(narrow(padded, 2, t, n), reshape(narrow(w, 1, t, 1), {1, H, 1, 1})));
  return out;
}

}  // namespace eng
