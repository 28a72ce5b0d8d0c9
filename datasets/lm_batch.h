// A batch of a sequence task for a language model, shared by every task: inputs and the targets to predict,
// with kIgnore where there is nothing to predict (loss and accuracy leave those positions out).
#pragma once
#include <cstdint>

#include "engine/tensor.h"

namespace eng {

struct LMBatch {
  Tensor inputs;   // [B, L] i64
  Tensor targets;  // [B, L] i64, kIgnore where there is nothing to predict
};

constexpr int64_t kIgnore = -100;

}  // namespace eng
