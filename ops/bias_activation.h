// Fused bias + activation, y = act(x + bias): the first layer of a feed-forward block in one pass over
// the [rows, d_ff] tensor forward and one backward, instead of an add (whose backward sums the gradient
// back to the bias) followed by an activation. Op "bias_activation"; f32 or f64.
#pragma once
#include "engine/tensor.h"

namespace eng {

enum class BiasActivation {
  None,      // x + bias
  Relu,      // max(x + bias, 0)
  GeluErf,   // exact gelu, as gelu(h, GeluForm::Erf) (ops/activation.h)
  GeluTanh,  // tanh approximation, as gelu(h, GeluForm::Tanh)
};

// bias is 1-D of size x.size(-1), broadcast over the leading dims, or undefined (no bias). The gradient
// of the bias is summed over rows in a fixed order: bitwise the same for any thread count.
Tensor bias_activation(const Tensor& x, const Tensor& bias, BiasActivation act);

}  // namespace eng
