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

// cross_entropy(x weightᵀ + bias, targets) without ever holding the [N, C] logits: the forward computes them
// `chunk` rows at a time and keeps only each row's log-sum-exp; the backward recomputes one chunk's logits at
// a time for dx = G weight, dweight = Gᵀ x, dbias = Σ G (Reformer's chunked output log-probabilities, Kitaev et
// al. 2020 §4). x [..., d], weight [C, d], bias [C] or undefined, targets [...] (i64). Same value and
// gradients as the unfused form; memory O(chunk · C) instead of O(N · C), for one more x·weightᵀ product.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& targets,
                            int64_t chunk, int64_t ignore_index = -100, double label_smoothing = 0.0);

}  // namespace eng
