// Matrix product with NumPy/PyTorch semantics: a [..., M, K] · b [..., K, N] -> [..., M, N] with
// broadcast batch dims; a 1-D a is a row [1, K] and a 1-D b a column [K, 1], their unit dim dropped
// from the result. Transposed or sliced operands are read through their strides, without copies.
#pragma once
#include "engine/tensor.h"

namespace eng {

Tensor matmul(const Tensor& a, const Tensor& b);

// A Linear layer: x [..., in] · weightᵀ (weight [out, in]) + bias [out], the bias added inside the product (ops/gemm.h)
// rather than by a pass over the output. Gradients flow to all three.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

}  // namespace eng
