// Improved clustered attention (Vyas, Katharopoulos, Fleuret 2020, "Fast Transformers with Clustered Attention",
// arXiv 2007.04825, Sec. 3.3), the `improved-clustered` variant, and the fast-transformers library's causal form
// `causal-improved-clustered` (improved_clustered_causal_attention.py; not in the paper). Queries are clustered as in
// `clustered` (models/attention/query_clustering.h), with centroid attention A^c = softmax(Q^c Kᵀ / √D) (Eq. 4).
//
// improved-clustered: T_j = the k keys of largest centroid logit for cluster j (among the non-padded keys; ties: the
// lower key index), m̂_j = Σ_{l ∈ T_j} A^c_jl the centroid's mass on them, and for a query i of cluster j
//
//   A^t_il = m̂_j · exp(q_i·k_l/√D) / Σ_{r ∈ T_j} exp(q_i·k_r/√D)    if l ∈ T_j                       (Eq. 8)
//          = A^c_jl                                                   otherwise
//   V̂_i   = Σ_l A^t_il v_l                                                                           (Eq. 9)
//
// so each query spends the centroid's top-k mass on its own exact top-k weights. With k ≥ N it is full softmax
// attention exactly (m̂ = 1, no remaining key). (Equation numbers as recalled from arXiv v2, not confirmed against
// a stored copy: docs/attention/improved-clustered.md.)
//
// causal-improved-clustered (the library's causal form): query i attends by exact softmax only to T_i = the k keys
// of largest centroid logit (its cluster's centroid) among the keys it may see (j ≤ i + query_offset, j < length);
// no remaining-key term, since the centroid's attention mixes positions. The library takes its cluster's top-k over
// ALL keys and then hides the future ones; we choose among the visible keys. With a causal mask, row i's clusters are
// the K-means of the queries 0 … i only (a K-means over all N queries would let later queries move row i's
// centroid), so no later position reaches an earlier row; without one, the K-means runs over all N queries.
//
// The clustering and the top-k choice are constants. improved-clustered is differentiable wrt q (through its
// exact logits, and through the centroids in m̂ and A^c), k and v; causal-improved-clustered wrt q, k and v through
// the chosen logits and values only. Cost per head: O(N·C·(D + Dv)) for the centroid attention (improved) or
// O(N·C·D) for the centroid logits (causal form, no mask), O(C·Lk·log k) to choose the clusters' top-k (causal
// form: a sort per cluster, O(C·Lk·log Lk), and a walk per query, O(Lk) at worst), and O(N·k·(D + Dv)) time and
// memory for the exact top-k logits and the gathered keys and values (kept for the backward); memory
// O(C·(N + Lk) + N·k·(D + Dv)). With a causal mask, a K-means per row: O(N²·(iterations·(C + bits) + D)) time.
//
// Options: those of query_clustering.h and topk = k (default 32, >= 1). Masks: key padding; causal only for
// causal-improved-clustered (config.causal and causal masks are refused by improved-clustered); keep, bias and ALiBi
// are refused.
//
// Recurrent form (causal-improved-clustered built causal): step() equals the causal parallel form's row t. It hashes
// q_t with the planes of call() (never advanced by step(); the parallel form advances it only in training mode) and
// runs the parallel form's per-row choice (prefix_top_keys) on the cached codes, queries and keys, then exact softmax
// over the k keys. The state keeps every position's q (H heads), hash code, k and v (G heads). Cost per step:
// O(bits·D) to hash, O(iterations·t·(C + bits)) for the K-means, O(t·(D + log k)) for the centroid, its logits and
// the top k, O(k·(D + Dv)) to attend — O(t) per step like a KV cache, with a larger constant; memory per position:
// H·(D + 1) + G·(D + Dv) numbers.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "models/attention/query_clustering.h"
#include "models/attention/row_cache.h"

namespace eng {

// The recurrent state of causal-improved-clustered attention.
struct ClusteredState : AttentionState {
  RowCache queries;       // [B, H, ·, D]
  RowCache codes;         // [B, H, ·, 1] i64: the hash code of each query
  RowCache keys, values;  // [B, G, ·, D], [B, G, ·, Dv]
};

class ImprovedClusteredAttention : public QueryClusteredAttention {
 public:
  // causal_form: the `causal-improved-clustered` variant.
  ImprovedClusteredAttention(const AttentionConfig& config, bool causal_form);
  std::string name() const override { return variant_; }
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;

  int64_t topk() const { return topk_; }
  bool causal_form() const { return causal_form_; }
  // Null unless the causal form was built causal.
  std::unique_ptr<AttentionState> new_state() const override;

 protected:
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  Tensor improved(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                  const std::vector<int64_t>& ids, int64_t kk) const;
  Tensor causal(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                const std::vector<int64_t>& ids, int64_t kk) const;
  Tensor prefix_causal(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                       int64_t call_index, int64_t kk) const;
  using RowReader = std::function<void(int64_t, double*)>;  // row n of a (batch, head), as D doubles
  void prefix_top_keys(const std::vector<uint64_t>& codes, const RowReader& query, const RowReader& key, int64_t D,
                       int64_t end, int64_t kk, int64_t* out) const;

  bool causal_form_;
  bool causal_;  // built causal (AttentionConfig::causal)
  int64_t topk_;
};

}  // namespace eng
