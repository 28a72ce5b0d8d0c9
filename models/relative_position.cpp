#include "models/relative_position.h"

#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/view.h"

namespace eng {

Tensor relative_sinusoid(int64_t d_max, int64_t count, int64_t dim, DType dtype) {
  ENG_CHECK(count >= 1 && dim >= 1, "relative_sinusoid: sizes must be positive, got ", count, " x ", dim);
  // Row c is row c - 1 turned back by each frequency f (sin(a - f) = sin a cos f - cos a sin f, cos(a - f) =
  // cos a cos f + sin a sin f): two trigonometric calls per kAnchor rows instead of one per element, which made
  // the table most of a generated token's time. Every kAnchor-th row is computed directly, so the rounding of
  // the recurrence stays within a few ulps.
  constexpr int64_t kAnchor = 16;
  const size_t half = size_t(dim + 1) / 2;  // column pairs (sin, cos) sharing one frequency
  std::vector<double> freq(half), cos_f(half), sin_f(half), s(half), c(half);
  for (size_t k = 0; k < half; ++k) {
    freq[k] = std::pow(10000.0, -double(2 * k) / double(dim));
    cos_f[k] = std::cos(freq[k]);
    sin_f[k] = std::sin(freq[k]);
  }
  Tensor t = empty({count, dim}, DType::F64);
  double* p = t.data<double>();
  for (int64_t r = 0; r < count; ++r) {
    double* row = p + r * dim;
    for (size_t k = 0; k < half; ++k) {
      if (r % kAnchor == 0) {
        const double a = double(d_max - r) * freq[k];
        s[k] = std::sin(a);
        c[k] = std::cos(a);
      } else {
        const double sk = s[k] * cos_f[k] - c[k] * sin_f[k];
        c[k] = c[k] * cos_f[k] + s[k] * sin_f[k];
        s[k] = sk;
      }
      row[2 * k] = s[k];
      if (int64_t(2 * k + 1) < dim) row[2 * k + 1] = c[k];
    }
  }
  return t.to(dtype);
}

RelativePosition::RelativePosition(int64_t d_model, int64_t heads, Rng& rng)
    : r_proj(d_model, d_model, rng, false), heads_(heads), head_dim_(d_model / heads) {
  ENG_CHECK(heads >= 1 && d_model % heads == 0, "relative position: d_model ", d_model, " is not divisible by heads ",
            heads);
  register_module("r_proj", r_proj);
  r_proj.keep_f32();  // position_bias reads W_{k,R} itself
  NoGradGuard no_grad;
  u = register_parameter("u", mul_scalar(randn({heads, head_dim_}, rng), 0.02));
  v = register_parameter("v", mul_scalar(randn({heads, head_dim_}, rng), 0.02));
}

Tensor RelativePosition::content_queries(const Tensor& q) const {
  return add(q, reshape(u, {1, heads_, 1, head_dim_}));
}

Tensor RelativePosition::position_bias(const Tensor& q, int64_t Lk, int64_t query_offset) const {
  ENG_CHECK(q.dim() == 4 && q.size(1) == heads_ && q.size(3) == head_dim_, "relative position: queries must be [B, ",
            heads_, ", Lq, ", head_dim_, "], got ", q.shape());
  ENG_CHECK(Lk >= 1 && query_offset >= 0, "relative position: needs Lk >= 1 keys and query_offset >= 0, got Lk ", Lk,
            ", query_offset ", query_offset);
  const int64_t B = q.size(0), H = heads_, Lq = q.size(2), Dh = head_dim_, d = H * Dh, P = Lq + Lk;
  const Tensor qv = mul_scalar(add(q, reshape(v, {1, H, 1, Dh})), 1.0 / std::sqrt(double(Dh)));
  const Tensor table = relative_sinusoid(query_offset + Lq - 1, P, d, q.dtype());  // [P, d]
  // W_{k,R} goes on whichever side has fewer rows to project (multiply-adds of each order).
  const double table_cost = double(P) * double(d) * double(d + B * Lq);
  const double query_cost = double(B * Lq) * double(d) * double(d + H * P);
  Tensor bd;  // [B, H, Lq, P]: query i against every distance of the table
  if (table_cost <= query_cost) {
    bd = matmul(qv, permute(reshape(r_proj.forward(table), {P, H, Dh}), {1, 2, 0}));
  } else {
    const Tensor w = matmul(qv, reshape(r_proj.weight, {H, Dh, d}));  // [B, H, Lq, d]: (q_i + v)ᵀ W_{k,R}, per head
    bd = matmul(w, transpose(table, 0, 1));
  }
  // The relative shift: key j of query i is BD[i, Lq - 1 - i + j], element (Lq - 1) + i (P - 1) + j.
  const Tensor rows = reshape(narrow(reshape(bd, {B, H, Lq * P}), 2, Lq - 1, Lq * (P - 1)), {B, H, Lq, P - 1});
  return narrow(rows, 3, 0, Lk);
}

}  // namespace eng
