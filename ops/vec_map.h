// Elementwise maps that run a SIMD kernel of engine/vec_kernels.h on the f32 contiguous case (split over
// threads) and fall back to the generic lambda of ops/kernel_util.h otherwise (f64, strided, broadcast).
#pragma once
#include <algorithm>

#include "engine/vec_kernels.h"
#include "ops/kernel_util.h"

namespace eng {

// kf(x, y, n) on f32 input (made contiguous first, so that every f32 result comes from the same kernel and
// a strided view gives the same bits as the whole tensor), else map_floating(a, op, f).
template <class KF, class F>
Tensor map_unary_vec(const Tensor& a, const char* op, KF kf, F f) {
  require_cpu(a, op);
  if (a.dtype() != DType::F32) return map_floating(a, op, f);
  const Tensor c = a.contiguous();
  Tensor out = empty(a.shape(), a.dtype());
  const float* x = c.data<float>();
  float* y = out.data<float>();
  parallel_for(0, a.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) { kf(x + lo, y + lo, hi - lo); });
  return out;
}

// Whether b's shape is a non-empty trailing part of a's (a bias row broadcast over a's leading dims).
inline bool is_trailing_shape(const Shape& a, const Shape& b) {
  if (b.empty() || b.size() > a.size()) return false;
  for (size_t i = 0; i < b.size(); ++i)
    if (b[b.size() - 1 - i] != a[a.size() - 1 - i]) return false;
  return shape_numel(b) > 0;
}

// kf(a, b, y, n) when both are f32 (made contiguous), of one shape or with b repeated along a's leading
// dims (then row by row); else map_binary(a, b, op, f).
template <class KF, class F>
Tensor map_binary_vec(const Tensor& a, const Tensor& b, const char* op, KF kf, F f) {
  require_cpu(a, op);
  require_cpu(b, op);
  const bool same = a.shape() == b.shape();
  if (a.dtype() != DType::F32 || b.dtype() != DType::F32 || !(same || is_trailing_shape(a.shape(), b.shape())))
    return map_binary(a, b, op, f);
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = empty(a.shape(), a.dtype());
  const float *x = ac.data<float>(), *z = bc.data<float>();
  float* y = out.data<float>();
  if (same) {
    parallel_for(0, a.numel(), kElementwiseGrain,
                 [&](int64_t lo, int64_t hi) { kf(x + lo, z + lo, y + lo, hi - lo); });
  } else {
    const int64_t c = b.numel();
    parallel_for(0, a.numel() / c, std::max<int64_t>(1, kElementwiseGrain / c), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) kf(x + r * c, z, y + r * c, c);
    });
  }
  return out;
}

}  // namespace eng
