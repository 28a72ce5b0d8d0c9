#include "models/attention/feature_map.h"

#include <cmath>
#include <map>

#include "engine/error.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/view.h"

namespace eng {
namespace {

std::map<std::string, FeatureMapFactory>& registry() {
  static std::map<std::string, FeatureMapFactory> r;
  return r;
}

// φ(x) = elu(x) + 1 (Eq. 7): positive, so the denominator never vanishes; the paper's default.
struct EluPlusOne : FeatureMap {
  std::string name() const override { return "elu"; }
  LinearFeature fused() const override { return LinearFeature::EluPlusOne; }
  bool signed_features() const override { return false; }
};

// φ(x) = max(x, 0): a row of φ(q) can be all zero, and then the output is 0 / eps = 0.
struct Relu : FeatureMap {
  std::string name() const override { return "relu"; }
  LinearFeature fused() const override { return LinearFeature::Relu; }
  bool signed_features() const override { return false; }
};

// The exact finite feature map of the degree-2 polynomial kernel (Eq. 8 with c = 1):
// φ(x) = [1, √2 x_1 .. √2 x_D, x_i x_j for all i, j], so φ(q)ᵀφ(k) = (1 + qᵀk)², M = 1 + D + D².
struct Polynomial2 : FeatureMap {
  std::string name() const override { return "poly2"; }
  int64_t dim(int64_t d) const override { return 1 + d + d * d; }
  Tensor apply(const Tensor& x) const override {
    const int64_t D = x.size(-1);
    Shape outer_shape = x.shape();
    outer_shape.back() = D * D;
    Tensor outer = reshape(mul(unsqueeze(x, -1), unsqueeze(x, -2)), outer_shape);
    Shape one_shape = x.shape();
    one_shape.back() = 1;
    return concat({ones(one_shape, x.dtype()), mul_scalar(x, std::sqrt(2.0)), outer}, -1);
  }
};

const bool registered = register_feature_map("elu", [] { return std::make_unique<EluPlusOne>(); }) &&
                        register_feature_map("relu", [] { return std::make_unique<Relu>(); }) &&
                        register_feature_map("poly2", [] { return std::make_unique<Polynomial2>(); });

}  // namespace

Tensor FeatureMap::features(const Tensor& x) const {
  switch (fused()) {
    case LinearFeature::EluPlusOne: return add_scalar(elu(apply(x)), 1.0);
    case LinearFeature::Relu: return relu(apply(x));
    case LinearFeature::Identity: break;
  }
  return apply(x);
}

bool register_feature_map(const std::string& name, FeatureMapFactory factory) {
  registry()[name] = std::move(factory);
  return true;
}

std::unique_ptr<FeatureMap> make_feature_map(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : feature_map_names()) known += (known.empty() ? "" : ", ") + n;
    fail("linear attention: unknown feature map '", name, "' (known: ", known, ")");
  }
  return it->second();
}

std::vector<std::string> feature_map_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

}  // namespace eng
