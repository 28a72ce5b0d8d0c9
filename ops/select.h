// Elementwise selection by a condition. A condition or mask is i64 or of the values' dtype, and
// counts as true where it is non-zero; it never receives a gradient.
#pragma once
#include "engine/tensor.h"

namespace eng {

// x with `value` where mask != 0; mask broadcasts to x's shape. No gradient flows where masked.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// a where cond != 0, else b; cond, a and b broadcast together (NumPy rules).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

}  // namespace eng
