// Normalisations over the last dimension, row by row (a row is one vector of the last dim).
// weight and bias are 1-D of the last dim's size; an undefined Tensor() means absent (scale 1,
// shift 0). Both save per-row statistics in the forward pass and use closed-form backwards.
#pragma once
#include "engine/tensor.h"

namespace eng {

// y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance (divide by C), as in
// PyTorch. Gradients flow to x, weight and bias.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// y = x / sqrt(mean(x^2) + eps) * weight (no centring, no bias).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

// A residual add fused with the norm that follows it: sum = x + h and normed = norm(sum), in one pass over
// the rows for f32 (x and h of one shape). Both outputs are differentiable: sum is recorded as the op "add"
// and normed as layer_norm / rms_norm of sum.
struct AddNormResult {
  Tensor sum, normed;
};
AddNormResult add_layer_norm(const Tensor& x, const Tensor& h, const Tensor& weight, const Tensor& bias,
                             double eps = 1e-5);
AddNormResult add_rms_norm(const Tensor& x, const Tensor& h, const Tensor& weight, double eps = 1e-6);

}  // namespace eng
