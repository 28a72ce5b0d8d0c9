// Position-wise feed-forward network, with dropout after the activation (or after the gated product):
//   relu, gelu (erf), gelu-tanh:  y = W2 · act(W1 · x + b1) + b2
//   swiglu (Shazeer 2020, LLaMA): y = W2 · (silu(W1 · x + b1) ⊙ (W3 · x + b3)) + b2,  silu(h) = h σ(h)
//   geglu  (Shazeer 2020):        the same with the exact (erf) gelu in place of silu
// W1 is fc1 [d_ff, d_model], W2 fc2 [d_model, d_ff], W3 fc3 [d_ff, d_model] (gated activations only); the biases
// exist when built with `bias`. `chunk` > 0 evaluates the positions in chunks of that many rows: the same result,
// with the [rows, d_ff] hidden activation held for one chunk at a time (the memory saving is real under no_grad;
// with gradients on, autograd keeps every chunk's activations for the backward pass).
#pragma once
#include <memory>
#include <string>

#include "models/dropout_layer.h"
#include "models/linear.h"

namespace eng {

enum class Activation { Relu, Gelu, GeluTanh, SwiGLU, GeGLU };
Activation parse_activation(const std::string& name);  // "relu", "gelu", "gelu-tanh", "swiglu", "geglu"
const char* activation_name(Activation a);
bool activation_is_gated(Activation a);  // swiglu, geglu: a third projection W3

class FeedForward : public Module {
 public:
  FeedForward(int64_t d_model, int64_t d_ff, Activation act, double dropout, Rng& rng, bool bias = true);
  Tensor forward(const Tensor& x) const;  // [..., d_model]
  void set_chunk(int64_t rows) { chunk_ = rows; }

  Linear fc1, fc2;
  std::unique_ptr<Linear> fc3;  // the gate's second projection; gated activations only

 private:
  Tensor forward_rows(const Tensor& x) const;
  Activation act_;
  Dropout drop_;
  int64_t chunk_ = 0;
};

}  // namespace eng
