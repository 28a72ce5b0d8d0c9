// Normalisation layers over the last dimension: LayerNorm (weight 1, bias 0) and RMSNorm (weight 1).
#pragma once
#include "models/module.h"
#include "ops/norm.h"

namespace eng {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) const;
  AddNormResult forward_add(const Tensor& x, const Tensor& h) const;  // x + h and its norm, fused
  Tensor weight, bias;  // [dim] each; undefined when not affine
  double eps() const { return eps_; }

 private:
  double eps_;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor& x) const;
  AddNormResult forward_add(const Tensor& x, const Tensor& h) const;  // x + h and its norm, fused
  Tensor weight;  // [dim]
  double eps() const { return eps_; }

 private:
  double eps_;
};

}  // namespace eng
