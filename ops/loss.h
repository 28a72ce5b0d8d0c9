// Losses. Each returns a scalar (shape []) in the dtype of its prediction input.
#pragma once
#include "engine/tensor.h"

namespace eng {

// Softmax cross-entropy of logits [..., C] against class ids targets [...] (i64), averaged over the
// positions whose target is not ignore_index (0, not NaN, when all are ignored). With label
// smoothing eps the target distribution is (1 - eps) one-hot + eps / C uniform, as in PyTorch.
// Fused: the gradient is (softmax - target distribution) / count, with no softmax tensor kept.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);

}  // namespace eng
