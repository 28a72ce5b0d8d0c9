// Activation functions (f32 or f64), elementwise. Each backward is the closed-form derivative in one
// kernel over the gradient and the saved input or output (the output where that is cheaper).
#pragma once
#include "engine/tensor.h"

namespace eng {

enum class GeluForm {
  Erf,   // exact: 0.5 x (1 + erf(x / sqrt 2)); op "gelu_erf"
  Tanh,  // approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); op "gelu_tanh"
};

Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, GeluForm form = GeluForm::Erf);
Tensor elu(const Tensor& x, double alpha = 1.0);  // x > 0 ? x : alpha (exp(x) - 1)
Tensor sigmoid(const Tensor& x);                  // exact 0 / 1 for large |x|, never NaN
Tensor tanh(const Tensor& x);
// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (as PyTorch). beta > 0.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor silu(const Tensor& x);  // x sigmoid(x)

}  // namespace eng
