// Exact top-k attention, the `exact-topk` variant: the oracle that improved clustered attention approximates (Vyas,
// Katharopoulos, Fleuret 2020, "Fast Transformers with Clustered Attention", arXiv 2007.04825, Sec. 3.3 and the
// fast-transformers library's exact_topk_attention.py). Each query attends, by softmax with scale 1/√D, only to the
// k keys of largest logit q_i·k_j among the keys it may see:
//
//   T_i = the min(k, #visible) visible keys of largest q_i·k_j (ties: the LOWER key index wins)
//   out_i = Σ_{j ∈ T_i} softmax_{j ∈ T_i}(q_i·k_j / √D) v_j
//
// The selection is a constant (not differentiated): the gradient flows through the k chosen logits and values.
// Cost per head: O(Lq·Lk·D) time to score every pair (in double, one query row at a time: O(Lk) scratch) and
// O(Lq·Lk·log k) to select; then O(Lq·k·(D + Dv)) time and memory for the chosen keys and values, gathered per query
// (kept for the backward). Never an Lq × Lk tensor.
//
// Options: topk = k (default 32, >= 1). Masks: causal (with query_offset: top-k among j <= i + offset) and key
// padding (top-k among j < length); a query with no visible key outputs zeros. keep, bias and ALiBi are refused.
//
// Recurrent form: a KV cache (softmax.h's kv_cache_step). Step t selects the top k of row t over the cached keys
// j <= t with the same scores and tie rule as the parallel form, so it chooses the same keys: O(t·D + t·log k) per
// step and head, O(G·t·D) memory for G K/V groups. Every key stays: any of them may enter a later row's top k.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/attention/attention.h"

namespace eng {

// Writes the min(kk, end) keys j < end of largest scores[j] to out[0 …], largest first (ties: the lower index
// first); the remaining slots of out[0 … kk) get -1.
void top_keys(const double* scores, int64_t end, int64_t kk, int64_t* out);

// Per-query key lists: keys[((b·H + h)·Lq + i)·kk + s] is the s-th key of query i (-1: an empty slot).
struct KeyListAttention {
  Tensor logits;  // [B, H, Lq, 1, kk]: q_i·k_j / √D, −inf on empty slots (differentiable wrt q and k)
  Tensor values;  // [B, H, Lq, kk, Dv]: v_j of each slot (differentiable wrt v)
};
KeyListAttention gather_key_lists(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& keys,
                                  int64_t kk);
// Σ_s weights[s] v_{key s} for weights [B, H, Lq, 1, kk]: [B, H, Lq, Dv].
Tensor apply_key_lists(const Tensor& weights, const KeyListAttention& lists);

class ExactTopkAttention : public Attention {
 public:
  explicit ExactTopkAttention(const AttentionConfig& config);
  std::string name() const override { return "exact-topk"; }
  std::unique_ptr<AttentionState> new_state() const override;
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

  int64_t topk() const { return topk_; }
  // The chosen keys of every query, [B, H, Lq, min(topk, Lk)] i64, −1 on empty slots (checks the mask).
  Tensor selected(const Tensor& q, const Tensor& k, const AttentionMask& mask) const;

 private:
  std::vector<int64_t> select(const Tensor& q, const Tensor& k, const AttentionMask& mask, int64_t kk) const;
  int64_t topk_;
};

}  // namespace eng
