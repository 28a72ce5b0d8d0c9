// Softmax attention (Vaswani et al. 2017, Eq. 1): out = softmax(q k^T * scale + mask) v, the `softmax` variant.
//
// Options: impl = auto | flash | naive. auto and flash run the fused kernel (ops/attention_flash.h: O(N) extra
// memory, forward and backward); naive materialises the logits (ops/attention_naive.h), the reference.
// scale = the logit scale, default 1/sqrt(D) with D the head dim of q.
//
// Recurrent form: a KV cache. step() writes the new position's k and v at position state.length (the caller
// advances length afterwards) and attends over positions 0 .. state.length with query_offset = state.length,
// so causal masking and ALiBi see absolute positions and the result equals that row of the causal parallel
// form. It is for generation: no gradient flows into the cached keys and values. k and v may have G heads
// dividing q's H (grouped-query attention): the cache then holds G heads, repeated to H for each step's
// attention (a view for G = 1, a copy of the cached keys and values for 1 < G < H).
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "models/attention/attention.h"

namespace eng {

// Keys [B, H, capacity, D] and values [B, H, capacity, Dv]; positions < stored hold data. The capacity
// doubles when full, so appending N positions copies O(N) positions in all.
struct KVCacheState : AttentionState {
  ENG_TYPE_TAG(KVCacheState, AttentionState)
  Tensor k, v;
  int64_t stored = 0;
  int64_t capacity() const { return v.defined() ? v.size(2) : 0; }
};

// Writes one position's k [B, G, 1, D] and v [B, G, 1, Dv] at position state.length (checked: the caller advances
// length after each step) and returns the cached positions 0 .. length as views {k [B, G, length + 1, D], v}.
// An undefined k caches values only (a variant that never reads keys). The step of every variant whose recurrent
// form is a KV cache (softmax, talking-heads, gaussian-prior, synthesizer, exact-topk); `who` names it in errors.
std::pair<Tensor, Tensor> kv_cache_append(KVCacheState& cache, const Tensor& k, const Tensor& v, const std::string& who);

// The whole step of a variant whose parallel form takes causal queries that continue a sequence (query_offset):
// appends k and v to `state` (a KVCacheState, else an error) and runs a.forward on the new query against the cached
// positions 0 .. length, K/V groups repeated to q's heads, with mask.causal and query_offset = length. The variant's
// rule is thereby applied to row `length` alone, exactly as in the parallel form. keys = false caches values only
// and hands forward a stride-0 view of the new key in place of the keys (for a variant that reads only their count).
Tensor kv_cache_step(Attention& a, const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask, bool keys = true);

class SoftmaxAttention : public Attention {
 public:
  ENG_TYPE_TAG(SoftmaxAttention, Attention)
  explicit SoftmaxAttention(const AttentionConfig& config);
  std::string name() const override { return "softmax"; }
  std::unique_ptr<AttentionState> new_state() const override;
  // The factor of q·k for heads of `head_dim`: the option `scale`, else 1/sqrt(head_dim).
  double scale(int64_t head_dim) const;

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  bool naive_ = false;
  double scale_ = 0;  // 0: 1/sqrt(D)
};

}  // namespace eng
