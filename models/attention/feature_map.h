// Feature maps φ for the linear attention family: sim(q, k) = φ(q)ᵀ φ(k) (Katharopoulos et al. 2020, Eq. 4).
//
// A map either is elementwise and fused into the kernels (ops/linear_attention.h: elu+1, relu; `apply` is
// then the identity and `fused` says which map the kernel applies), or computes φ with differentiable ops
// (`apply`) and runs the kernels with LinearFeature::Identity. Maps register by name, so adding one is a
// class and a register_feature_map call (the option `feature_map=<name>` of `linear` and `causal-linear`).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "ops/linear_attention.h"

namespace eng {

class FeatureMap {
 public:
  virtual ~FeatureMap() = default;
  virtual std::string name() const = 0;
  virtual LinearFeature fused() const { return LinearFeature::Identity; }  // applied inside the kernel
  virtual Tensor apply(const Tensor& x) const { return x; }               // [.., D] -> [.., dim(D)]
  virtual int64_t dim(int64_t head_dim) const { return head_dim; }
  // Whether φ can be negative, so that φ(q)ᵀφ(k) sums terms that cancel (poly2; also assumed of a registered map
  // that does not say otherwise): the recurrent form then keeps its f32 state in f64 (ops/linear_attention.h).
  virtual bool signed_features() const { return true; }
  // φ(x) itself, fused or not (for code outside the kernels, e.g. digesting a cross-attention memory).
  Tensor features(const Tensor& x) const;
};

using FeatureMapFactory = std::function<std::unique_ptr<FeatureMap>()>;
bool register_feature_map(const std::string& name, FeatureMapFactory factory);
// An unknown name lists the known ones.
std::unique_ptr<FeatureMap> make_feature_map(const std::string& name);
std::vector<std::string> feature_map_names();

}  // namespace eng
