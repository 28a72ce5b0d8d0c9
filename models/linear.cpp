#include "models/linear.h"

#include <cmath>

#include "engine/error.h"
#include "ops/bias_activation.h"
#include "ops/matmul.h"
#include "ops/quant.h"
#include "ops/view.h"

namespace eng {

Linear::Linear(int64_t in_features, int64_t out_features, Rng& rng, bool with_bias)
    : in_(in_features), out_(out_features) {
  ENG_CHECK(in_features > 0 && out_features > 0, "Linear: sizes must be positive, got in ", in_features, ", out ",
            out_features);
  double bound = 1.0 / std::sqrt(double(in_features));
  weight = register_parameter("weight", rand({out_features, in_features}, rng, DType::F32, -bound, bound));
  set_quantizable("weight", true);
  if (with_bias) bias = register_parameter("bias", rand({out_features}, rng, DType::F32, -bound, bound));
}

Tensor Linear::forward(const Tensor& x) const {
  return forward_activation(x, BiasActivation::None);
}

Tensor Linear::forward_activation(const Tensor& x, BiasActivation act) const {
  ENG_CHECK(x.dim() >= 1 && x.size(-1) == in_, "Linear: input of shape ", x.shape(), " does not end in in_features ",
            in_);
  if (weight.dtype() == DType::U8) {  // quantized (inference only)
    const Tensor y = quant_linear(x, weight, quant_format_of(weight, "Linear"), bias);
    return act == BiasActivation::None ? y : bias_activation(y, Tensor(), act);
  }
  // The bias goes into the product itself; an activation then reads the pre-activation it keeps for its backward.
  if (bias.defined()) return linear_activation(x, weight, bias, act);
  const Tensor y = matmul(x, transpose(weight, 0, 1));
  return act == BiasActivation::None ? y : bias_activation(y, Tensor(), act);
}

}  // namespace eng
