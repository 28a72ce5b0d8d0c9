// Position-wise feed-forward network: y = W2 · act(W1 · x + b1) + b2, with dropout after the
// activation. `chunk` > 0 evaluates the positions in chunks of that many rows: the same result, with
// the [rows, d_ff] hidden activation held for one chunk at a time (the memory saving is real under
// no_grad; with gradients on, autograd keeps every chunk's activations for the backward pass).
#pragma once
#include <string>

#include "models/dropout_layer.h"
#include "models/linear.h"

namespace eng {

enum class Activation { Relu, Gelu, GeluTanh };
Activation parse_activation(const std::string& name);  // "relu", "gelu", "gelu-tanh"

class FeedForward : public Module {
 public:
  FeedForward(int64_t d_model, int64_t d_ff, Activation act, double dropout, Rng& rng);
  Tensor forward(const Tensor& x) const;  // [..., d_model]
  void set_chunk(int64_t rows) { chunk_ = rows; }

  Linear fc1, fc2;

 private:
  Tensor forward_rows(const Tensor& x) const;
  Activation act_;
  Dropout drop_;
  int64_t chunk_ = 0;
};

}  // namespace eng
