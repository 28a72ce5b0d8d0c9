// Softmax attention by the definition, the reference every faster kernel is tested against:
//   out = softmax(q k^T * scale + dense mask) v
// with q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] -> [B, H, Lq, Dv]. It materialises the
// [B, H, Lq, Lk] logits (time O(Lq Lk D), memory O(Lq Lk) forward and backward) and is built from
// differentiable ops (matmul, transpose, add, softmax), so its gradient comes from autograd, including
// the gradient of mask.bias. A query whose keys are all masked gets zeros (softmax of an all -inf row is
// zero, with zero gradient), never NaN.
#pragma once
#include "engine/tensor.h"
#include "ops/attention_mask.h"

namespace eng {

Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale);

}  // namespace eng
