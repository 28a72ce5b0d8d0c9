// Inclusive prefix sums along one axis.
#pragma once
#include "engine/tensor.h"

namespace eng {

// out[..., i, ...] = sum of a[..., j, ...] over j <= i along `axis` (j >= i when reverse), as a new
// contiguous tensor of a's shape. A negative axis counts from the end; a 0-D tensor takes axis 0 or -1.
Tensor cumsum(const Tensor& a, int64_t axis, bool reverse = false);

}  // namespace eng
