#include "models/feed_forward.h"

#include "engine/error.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/view.h"

namespace eng {

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::Relu;
  if (name == "gelu") return Activation::Gelu;
  if (name == "gelu-tanh") return Activation::GeluTanh;
  if (name == "swiglu") return Activation::SwiGLU;
  if (name == "geglu") return Activation::GeGLU;
  fail("activation: expected relu, gelu, gelu-tanh, swiglu or geglu, got '", name, "'");
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::Relu: return "relu";
    case Activation::Gelu: return "gelu";
    case Activation::GeluTanh: return "gelu-tanh";
    case Activation::SwiGLU: return "swiglu";
    case Activation::GeGLU: return "geglu";
  }
  return "?";
}

bool activation_is_gated(Activation a) { return a == Activation::SwiGLU || a == Activation::GeGLU; }

FeedForward::FeedForward(int64_t d_model, int64_t d_ff, Activation act, double dropout, Rng& rng, bool bias)
    : fc1(d_model, d_ff, rng, bias), fc2(d_ff, d_model, rng, bias), act_(act), drop_(dropout, rng) {
  register_module("fc1", fc1);
  register_module("fc2", fc2);
  if (activation_is_gated(act)) {
    fc3 = std::make_unique<Linear>(d_model, d_ff, rng, bias);
    register_module("fc3", *fc3);
  }
  register_module("dropout", drop_);
}

Tensor FeedForward::forward_rows(const Tensor& x) const {
  BiasActivation act = BiasActivation::Relu;
  switch (act_) {
    case Activation::Relu: act = BiasActivation::Relu; break;
    case Activation::Gelu: act = BiasActivation::GeluErf; break;
    case Activation::GeluTanh: act = BiasActivation::GeluTanh; break;
    case Activation::SwiGLU: return fc2.forward(drop_.forward(mul(silu(fc1.forward(x)), fc3->forward(x))));
    case Activation::GeGLU: return fc2.forward(drop_.forward(mul(gelu(fc1.forward(x)), fc3->forward(x))));
  }
  return fc2.forward(drop_.forward(fc1.forward_activation(x, act)));
}

Tensor FeedForward::forward(const Tensor& x) const {
  if (chunk_ <= 0 || x.dim() < 2) return forward_rows(x);
  Tensor rows = reshape(x, {-1, x.size(-1)});
  if (rows.size(0) <= chunk_) return forward_rows(x);
  std::vector<Tensor> outs;
  for (const Tensor& part : split(rows, chunk_, 0)) outs.push_back(forward_rows(part));
  return reshape(concat(outs, 0), x.shape());
}

}  // namespace eng
