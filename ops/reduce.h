// Reductions over axes. `axes` empty means all axes. keepdim keeps reduced axes as size 1.
#pragma once
#include "engine/tensor.h"

namespace eng {

Tensor sum(const Tensor& a, const Shape& axes = {}, bool keepdim = false);
// Sums a broadcast result back to `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& a, const Shape& shape);

// out[c] = sum over r of x[r * cols + c] for a contiguous f32 [rows, cols] (bias gradients): column blocks in
// parallel, rows added in order with the SIMD add into float partials over 64 rows, those added in double;
// the same bits for any thread count. sum() takes this path for leading axes of a contiguous f32 tensor.
void sum_rows_f32(const float* x, int64_t rows, int64_t cols, float* out);

// Mean over axes; a reduction over zero elements gives NaN (0 / 0).
Tensor mean(const Tensor& a, const Shape& axes = {}, bool keepdim = false);

// Largest / smallest element over axes. NaN propagates: a slice holding a NaN reduces to NaN.
// The gradient goes to the elements equal to the result, split evenly among ties (a slice whose
// maximum appears 3 times gives each of those elements g / 3), so the gradient is the average of the
// one-hot subgradients. Reducing over an axis of size 0 is an error.
Tensor max(const Tensor& a, const Shape& axes = {}, bool keepdim = false);
Tensor min(const Tensor& a, const Shape& axes = {}, bool keepdim = false);

// Index of the first maximum along `axis`, as an i64 tensor (a NaN counts as the maximum, like max).
// Not differentiable. An axis of size 0 is an error.
Tensor argmax(const Tensor& a, int64_t axis, bool keepdim = false);

}  // namespace eng
