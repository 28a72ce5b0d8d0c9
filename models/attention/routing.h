// Routing attention (Roy, Saffar, Vaswani, Grangier 2020, "Efficient Content-Based Sparse Attention with Routing
// Transformers", arXiv 2003.05997, §4 "Routing attention"), the `routing` variant: queries and keys are routed
// to C centroids of an online k-means, and a query attends only to keys routed to the same centroid.
//
//   normalise  q̂ = LN(q), k̂ = LN(k): layer norm without scale or bias (§4: it puts every vector on the same
//              sphere of radius √D, so the nearest centroid is the one with the largest dot product)
//   route      balanced clusters, as the paper's implementation does: centroid c takes the w queries with the
//              largest μ_c·q̂_i and the w keys with the largest μ_c·k̂_j (ties: lower position first; padded keys
//              rank last), w = `window`
//   attend     a query of Q_c attends to the keys of K_c (j < key_length), softmax of q̂_i·k̂_j / √D over them:
//              o_i^(c) (the routing attention equation of §4, X'_i = Σ_j A_ij V_j over the routed keys)
//   causal     (mask.causal) the top-w sets are not causal (a later query or key can take an earlier one's place), so
//              each query and key goes to its nearest centroid, μ(x̂) = argmax_c μ_c·x̂ (the first on ties; §4's
//              μ(Q_i) = μ(K_j)), and query i attends to the w most recent keys j <= i (j < key_length) routed to
//              μ(q̂_i), or all of them with window 0: row i depends on positions <= i only
//   combine    o_i = mean of o_i^(c) over the sets c ∋ i in which i sees at least one key; zeros when none
//   update     training mode only, after the attention: μ_c ← λ μ_c + (1 − λ) · mean{x̂ : x̂ a real q̂_i or k̂_j
//              whose nearest centroid is c} (the online k-means EMA of §4, with λ = `decay`; the paper writes
//              (1 − λ)/2 Σ q̂ + (1 − λ)/2 Σ k̂, the implementation normalises by the count); no gradient reaches μ
//
// Cost per head: O(N·C·D) to score against the centroids, O(C·N log w) to pick the sets, O(C·w²·(D + Dv)) time
// and O(C·w²) memory for the routed logits — O(N·w·D) with the default w = ⌈N / C⌉ — never N × N. Causal: O(N·C·D)
// to route, O(N·w) to walk back to each query's keys (O(N²) at worst), O(N·w·(D + Dv)) time and O(N·(w + Dv))
// memory in the fused key-list op (ops/key_list_attention.h: no gathered keys or values), w the longest list.
//
// Options: clusters = C (default 8), window = w (default 0: ⌈N / C⌉ at each call, capped at N; causal: the whole
// cluster), decay = λ in
// [0, 1) (default 0.999), shared_qk (default false): keys are the queries (the k input is not read), as the
// authors' language models route them, so every query lands in its own key set; a position's logit on itself
// gets −1e5 added, so it attends to itself only when nothing else is visible (Reformer's rule). The centroids are the buffer "centroids" [H, C, D] (f64), drawn N(0, 1) from
// AttentionConfig::seed. Self-attention only (Lq == Lk); causal and key_lengths masks; keep, bias and ALiBi are
// refused.
//
// Recurrent form (built causal): step() equals the causal parallel form's row t. The centroids are fixed during
// generation (step() never updates them; the parallel form updates them only in training mode, after its
// attention, from the whole batch). The state keeps every position's k̂ (q̂ with shared_qk), v and key route per
// head; step t routes q̂_t and k̂_t and walks back from t to the first w keys of q̂_t's route. Cost per step and head:
// O(C·D) to route, O(t) integer compares at most to find the keys, O(w·(D + Dv)) to attend; memory per position:
// G·(D + Dv) numbers and H route ids. K/V may have G heads dividing q's H (grouped-query attention).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/attention/attention.h"
#include "models/attention/row_cache.h"

namespace eng {

// The recurrent state of causal routing attention.
struct RoutingState : AttentionState {
  RowCache keys;        // [B, G, ·, D]: k̂_j ([B, H, ·, D]: q̂_j with shared_qk)
  RowCache values;      // [B, G, ·, Dv]
  RowCache key_routes;  // [B, H, ·, 1] i64: the nearest centroid of k̂_j under head h's centroids
};

class RoutingAttention : public Attention {
 public:
  explicit RoutingAttention(const AttentionConfig& config);
  std::string name() const override { return "routing"; }

  // The sets the current centroids give the raw q, k [B, H, N, D] (normalised here as forward does; key_lengths
  // rank padded keys last): queries and keys [B, H, C, w] (i64), each set in increasing position order.
  struct Routes {
    Tensor queries, keys;
  };
  Routes routes(const Tensor& q, const Tensor& k, const AttentionMask& mask = {}) const;

  // The causal routes (mask made causal): queries [B, H, N] = each query's nearest centroid, keys [B, H, N, kk] =
  // its key list, the most recent first (−1 pads the lists to the longest, kk).
  Routes causal_routes(const Tensor& q, const Tensor& k, const AttentionMask& mask = {}) const;

  const Tensor& centroids() const { return centroids_; }  // [H, C, D], f64
  int64_t clusters() const { return clusters_; }
  int64_t window(int64_t n) const;  // w used for a sequence of n positions
  double decay() const { return decay_; }
  // Null unless built causal.
  std::unique_ptr<AttentionState> new_state() const override;

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  Routes route_normalised(const Tensor& qn, const Tensor& kn, const AttentionMask& mask) const;
  Routes causal_routes_normalised(const Tensor& qn, const Tensor& kn, const AttentionMask& mask) const;
  std::vector<int64_t> nearest_centroids(const Tensor& x) const;  // x [B, H, N, D] -> [B·H·N]
  Tensor attend_causal(const Tensor& qn, const Tensor& kn, const Tensor& v, const AttentionMask& mask) const;
  void update_centroids(const Tensor& qn, const Tensor& kn, const AttentionMask& mask);

  int64_t heads_, head_dim_, clusters_, window_;
  double decay_;
  bool shared_qk_;
  bool causal_;  // built causal (AttentionConfig::causal): the recurrent form exists
  Tensor centroids_;
};

}  // namespace eng
