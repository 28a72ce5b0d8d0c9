// The meaning of an AttentionMask, in one place: the checks every attention op runs on it, the rule
// that decides which keys a query sees, and the dense additive form [B, H, Lq, Lk] (0 or -inf, plus
// the bias and ALiBi terms) that the naive reference adds to its logits.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace eng {

// Which keys each query may see, for every attention mechanism (models/attention/attention.h).
struct AttentionMask {
  bool causal = false;         // query i sees keys j <= i + query_offset
  int64_t query_offset = 0;    // absolute position of query 0 (generation with a cache)
  std::vector<int64_t> key_lengths;  // per batch element: keys >= length are padding; empty = none
  Tensor keep;                 // optional, broadcastable to [B, H, Lq, Lk]: 0 masks a key, non-zero keeps it
  Tensor bias;                 // optional additive logits bias, broadcastable to [B, H, Lq, Lk]
  Tensor alibi_slopes;         // optional [H]: adds -slope * |i + query_offset - j| (ALiBi), computed on the fly

  bool any() const { return causal || !key_lengths.empty() || keep.defined() || bias.defined() || alibi_slopes.defined(); }
};

// Checks q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv]; names `op` and the shapes on failure.
void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const char* op);

// Checks the mask against logits of shape [B, H, Lq, Lk] and element type `dtype`: key_lengths has B
// entries in [0, Lk]; keep and bias broadcast to [B, H, Lq, Lk] (bias of dtype `dtype`); alibi_slopes
// is [H]. Slopes are constants: with grad mode on they must not require grad. `op` names the caller.
void check_attention_mask(const AttentionMask& mask, int64_t B, int64_t H, int64_t Lq, int64_t Lk, DType dtype,
                          const char* op);

// Query i of batch element b sees keys j < attention_key_end(...) as far as causality and padding go
// (keep, bias and ALiBi come on top): causal allows j <= i + query_offset, key_lengths[b] allows j < length.
inline int64_t attention_key_end(const AttentionMask& mask, int64_t b, int64_t i, int64_t Lk) {
  int64_t end = Lk;
  if (!mask.key_lengths.empty()) end = std::min(end, mask.key_lengths[size_t(b)]);
  if (mask.causal) end = std::min(end, i + mask.query_offset + 1);
  return std::max<int64_t>(end, 0);
}

// 1 where key j of batch element b is padding (j >= key_lengths[b]), else 0: an i64 tensor of shape
// [B, 1, Lk, 1] when `keys_on_rows` (masking the keys themselves), else [B, 1, 1, Lk] (masking logits whose
// last axis runs over keys), for masked_fill. key_lengths must not be empty.
Tensor padded_keys(const std::vector<int64_t>& key_lengths, int64_t Lk, bool keys_on_rows);

// The mask as a dense additive term of shape [B, H, Lq, Lk]: -inf where a key is hidden (causal,
// padding, keep == 0), else 0 - slope[h] * |i + query_offset - j| (ALiBi), plus mask.bias. Differentiable
// with respect to mask.bias only (through add); the rest is a constant. Checks the mask as `op`.
Tensor dense_attention_mask(const AttentionMask& mask, int64_t B, int64_t H, int64_t Lq, int64_t Lk, DType dtype,
                            const char* op = "dense_attention_mask");

}  // namespace eng
