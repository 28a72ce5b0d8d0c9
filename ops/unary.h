// Elementwise math on one tensor (f32 or f64). Each returns a new contiguous tensor of the input's
// shape; the backward is one elementwise kernel over the gradient and a saved tensor.
#pragma once
#include "engine/tensor.h"

namespace eng {

Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);    // natural log; gradient 1/a
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);  // 1 / sqrt(a)
Tensor abs(const Tensor& a);    // gradient sign(a), 0 at 0
// min(max(a, lo), hi); either bound may be +-infinity. Gradient 1 strictly inside (lo, hi), else 0.
Tensor clamp(const Tensor& a, double lo, double hi);
// -a, recorded as mul_scalar(a, -1).
Tensor neg(const Tensor& a);

}  // namespace eng
