// Inclusive prefix scans along one axis: sums, and log-sum-exps.
#pragma once
#include "engine/tensor.h"

namespace eng {

// out[..., i, ...] = sum of a[..., j, ...] over j <= i along `axis` (j >= i when reverse), as a new
// contiguous tensor of a's shape. A negative axis counts from the end; a 0-D tensor takes axis 0 or -1.
Tensor cumsum(const Tensor& a, int64_t axis, bool reverse = false);

// out[..., i, ...] = log Σ_{j <= i} exp(a[..., j, ...]) along `axis`, without overflow (a running maximum); −inf
// entries contribute nothing and a prefix of −inf gives −inf. Its gradient is formed from ratios exp(a_j − out_i)
// that are never above 1 (see the .cpp), so it stays finite wherever the output is.
Tensor logcumsumexp(const Tensor& a, int64_t axis);

}  // namespace eng
