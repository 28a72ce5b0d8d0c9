// What a training run will hold at its peak, estimated from its configuration before anything is allocated, so
// that a run that cannot fit is refused at once with the figures, instead of being killed by the kernel hours in
// (or minutes in, at 24 GB). The estimate is a lower bound: it counts only what a training step certainly holds
// at once (docs/training.md lists the terms), so a refused run could not have fitted.
#pragma once
#include <cstdint>
#include <string>

#include "models/transformer.h"

namespace eng::jobs {

struct MemoryEstimate {
  double weights = 0;      // parameters, their gradients and the optimizer's state (bytes)
  double activations = 0;  // what the layers keep for the backward pass, for one micro-batch
  double outputs = 0;      // the output layer's values and their gradients
  double inputs = 0;       // the micro-batch itself (frames of the ctc task)
  double total() const { return weights + activations + outputs + inputs; }
  std::string describe() const;  // "at least 31.2 GiB (weights 0.1, activations 1.2, outputs 29.9, inputs 0)"
};

// A micro-batch of `batch` sequences of `positions` tokens (or frames) each through the model `c`, with
// `input_features` floats per position of input data (0 for token ids) and `optimizer_states` tensors of state
// per parameter (2 for Adam).
MemoryEstimate estimate_training_memory(const TransformerConfig& c, int64_t batch, int64_t positions,
                                        int64_t input_features, int optimizer_states);

// Throws, with the estimate and what to lower, when it exceeds `limit_bytes`; `limit_text` says where the limit
// comes from.
void check_memory(const MemoryEstimate& e, double limit_bytes, const std::string& limit_text);

}  // namespace eng::jobs
