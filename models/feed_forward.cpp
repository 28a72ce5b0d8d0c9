#include "models/feed_forward.h"

#include "engine/error.h"
#include "ops/activation.h"
#include "ops/index.h"
#include "ops/view.h"

namespace eng {

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::Relu;
  if (name == "gelu") return Activation::Gelu;
  if (name == "gelu-tanh") return Activation::GeluTanh;
  fail("activation: expected relu, gelu or gelu-tanh, got '", name, "'");
}

FeedForward::FeedForward(int64_t d_model, int64_t d_ff, Activation act, double dropout, Rng& rng)
    : fc1(d_model, d_ff, rng), fc2(d_ff, d_model, rng), act_(act), drop_(dropout, rng) {
  register_module("fc1", fc1);
  register_module("fc2", fc2);
  register_module("dropout", drop_);
}

Tensor FeedForward::forward_rows(const Tensor& x) const {
  Tensor h = fc1.forward(x);
  switch (act_) {
    case Activation::Relu: h = relu(h); break;
    case Activation::Gelu: h = gelu(h, GeluForm::Erf); break;
    case Activation::GeluTanh: h = gelu(h, GeluForm::Tanh); break;
  }
  return fc2.forward(drop_.forward(h));
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
