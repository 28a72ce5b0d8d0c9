#include "models/norm_layers.h"

#include "engine/error.h"
#include "ops/norm.h"

namespace eng {

LayerNorm::LayerNorm(int64_t dim, double eps, bool affine) : eps_(eps) {
  ENG_CHECK(dim > 0, "LayerNorm: dim must be positive, got ", dim);
  if (affine) {
    weight = register_parameter("weight", ones({dim}));
    bias = register_parameter("bias", zeros({dim}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps_); }

AddNormResult LayerNorm::forward_add(const Tensor& x, const Tensor& h) const {
  return add_layer_norm(x, h, weight, bias, eps_);
}

RMSNorm::RMSNorm(int64_t dim, double eps) : eps_(eps) {
  ENG_CHECK(dim > 0, "RMSNorm: dim must be positive, got ", dim);
  weight = register_parameter("weight", ones({dim}));
}

Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, weight, eps_); }

AddNormResult RMSNorm::forward_add(const Tensor& x, const Tensor& h) const { return add_rms_norm(x, h, weight, eps_); }

}  // namespace eng
