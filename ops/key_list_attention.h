// Softmax attention over per-query key lists, fused: routing attention's causal form (models/attention/routing.h)
// without the gathered keys and values in memory.
//
//   out_i = Σ_s softmax_s(l_is) v_{j_s},   l_is = q_i·k_{j_s}·scale + bias_is
//
// over the slots s of query i's list (kk slots, j_s = −1 for an empty slot, which takes no part). A query with no
// key outputs zeros (never NaN). q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] -> [B, H, Lq, Dv]; the lists and
// the bias are constants of the call (not differentiated); gradients flow to q, k and v.
//
// Forward: per (batch, head), each query's logits in a scratch row of kk, accumulated in double; it keeps only the
// output and each query's log-sum-exp. Backward (flash-style): recomputes p_is = exp(l_is − lse_i), and adds
// dq_i = scale Σ_s dl_is k_{j_s}, dk_j += scale dl_is q_i, dv_j += p_is g_i with dl_is = p_is (g_i·v_{j_s} − g_i·o_i).
//
// Cost: time O(B·H·Lq·kk·(D + Dv)); memory O(B·H·Lq·(Dv + 1)) for the output and log-sum-exps, plus the lists:
// never the [B, H, Lq, kk, D] gathered keys. One task per (batch, head): results do not depend on the thread count.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/tensor.h"

namespace eng {

struct KeyLists {
  int64_t kk = 0;              // slots per query
  std::vector<int64_t> keys;   // [B, H, Lq, kk]: the key of each slot, −1 for an empty slot
  std::vector<double> bias;    // [B, H, Lq, kk] added to each slot's logit, or empty (no bias)
};

Tensor key_list_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const std::shared_ptr<const KeyLists>& lists, double scale);

}  // namespace eng
