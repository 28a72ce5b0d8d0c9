// Linear layer y = x Wᵀ + b. W is [out, in] (PyTorch's layout, so checkpoints map one to one).
// Initialisation as PyTorch's nn.Linear: W, b ~ U(-1/sqrt(in), 1/sqrt(in)). For inference W may be quantized
// (models/quantized.h): a u8 tensor of q8_0 or q4_0 blocks (ops/quant.h), which forward() multiplies by directly.
#pragma once
#include "engine/rng.h"
#include "models/module.h"
#include "ops/bias_activation.h"

namespace eng {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Rng& rng, bool bias = true);
  Tensor forward(const Tensor& x) const;  // x [..., in] -> [..., out]
  // act(x Wᵀ + b), the bias and activation fused into one pass (ops/bias_activation.h)
  Tensor forward_activation(const Tensor& x, BiasActivation act) const;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // For a layer whose owner reads `weight` directly (not through forward()): never quantized.
  void keep_f32() { set_quantizable("weight", false); }

  Tensor weight;  // [out, in]
  Tensor bias;    // [out], undefined when built without bias

 private:
  int64_t in_, out_;
};

}  // namespace eng
