// Matrix product with NumPy/PyTorch semantics: a [..., M, K] · b [..., K, N] -> [..., M, N] with
// broadcast batch dims; a 1-D a is a row [1, K] and a 1-D b a column [K, 1], their unit dim dropped
// from the result. Transposed or sliced operands are read through their strides, without copies.
#pragma once
#include <vector>

#include "engine/tensor.h"
#include "ops/bias_activation.h"

namespace eng {

Tensor matmul(const Tensor& a, const Tensor& b);

// A Linear layer: x [..., in] · weightᵀ (weight [out, in]) + bias [out], the bias added inside the product (ops/gemm.h)
// rather than by a pass over the output. Gradients flow to all three.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// bias_activation(linear(x, weight, bias), {}, act): where generation's packed weights serve the product (see
// linear_stacked below), the activation maps each thread's block of the output inside the product's job, while it is
// in cache; the same bits either way.
Tensor linear_activation(const Tensor& x, const Tensor& weight, const Tensor& bias, BiasActivation act);

// linear(x, weights[i], biases[i]) for every i as one product, where generation's packed weights serve it (a
// WeightPanelsScope active, f32, 3 to 48 rows, no gradient to record: ops/weight_panels.h): the weights' panels
// stacked side by side, so that x is packed once and the threads take one job, not one per weight. The same bits as
// linear() on each (every element is the same multiply-add chain). Empty where that path does not apply.
std::vector<Tensor> linear_stacked(const Tensor& x, const std::vector<Tensor>& weights,
                                   const std::vector<Tensor>& biases);

}  // namespace eng
