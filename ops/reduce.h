// Reductions over axes. `axes` empty means all axes. keepdim keeps reduced axes as size 1.
#pragma once
#include "engine/tensor.h"

namespace eng {

Tensor sum(const Tensor& a, const Shape& axes = {}, bool keepdim = false);
// Sums a broadcast result back to `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& a, const Shape& shape);

}  // namespace eng
