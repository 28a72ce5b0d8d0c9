// Routing attention (Roy, Saffar, Vaswani, Grangier 2020, "Efficient Content-Based Sparse Attention with Routing
// Transformers", arXiv 2003.05997, §4 "Routing attention"), the `routing` variant: queries and keys are routed
// to C centroids of an online k-means, and a query attends only to keys routed to the same centroid.
//
//   normalise  q̂ = LN(q), k̂ = LN(k): layer norm without scale or bias (§4: it puts every vector on the same
//              sphere of radius √D, so the nearest centroid is the one with the largest dot product)
//   route      balanced clusters, as the paper's implementation does: centroid c takes the w queries with the
//              largest μ_c·q̂_i and the w keys with the largest μ_c·k̂_j (ties: lower position first; padded keys
//              rank last), w = `window`
//   attend     a query of Q_c attends to the keys of K_c (j ≤ i when causal, j < key_length), softmax of
//              q̂_i·k̂_j / √D over them: o_i^(c) (the routing attention equation of §4, X'_i = Σ_j A_ij V_j over
//              the routed keys)
//   combine    o_i = mean of o_i^(c) over the sets c ∋ i in which i sees at least one key; zeros when none
//   update     training mode only, after the attention: μ_c ← λ μ_c + (1 − λ) · mean{x̂ : x̂ a real q̂_i or k̂_j
//              whose nearest centroid is c} (the online k-means EMA of §4, with λ = `decay`; the paper writes
//              (1 − λ)/2 Σ q̂ + (1 − λ)/2 Σ k̂, the implementation normalises by the count); no gradient reaches μ
//
// Cost per head: O(N·C·D) to score against the centroids, O(C·N log w) to pick the sets, O(C·w²·(D + Dv)) time
// and O(C·w²) memory for the routed logits — O(N·w·D) with the default w = ⌈N / C⌉ — never N × N.
//
// Options: clusters = C (default 8), window = w (default 0: ⌈N / C⌉ at each call; capped at N), decay = λ in
// [0, 1) (default 0.999), shared_qk (default false): keys are the queries (the k input is not read), as the
// authors' language models route them, so every query lands in its own key set; a position's logit on itself
// gets −1e5 added, so it attends to itself only when nothing else is visible (Reformer's rule). The centroids are the buffer "centroids" [H, C, D] (f64), drawn N(0, 1) from
// AttentionConfig::seed. Self-attention only (Lq == Lk); causal and key_lengths masks; keep, bias and ALiBi are
// refused. No recurrent form (new_state() is null).
#pragma once
#include <cstdint>
#include <string>

#include "models/attention/attention.h"

namespace eng {

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

  const Tensor& centroids() const { return centroids_; }  // [H, C, D], f64
  int64_t clusters() const { return clusters_; }
  int64_t window(int64_t n) const;  // w used for a sequence of n positions
  double decay() const { return decay_; }

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;

 private:
  Routes route_normalised(const Tensor& qn, const Tensor& kn, const AttentionMask& mask) const;
  void update_centroids(const Tensor& qn, const Tensor& kn, const AttentionMask& mask);

  int64_t heads_, head_dim_, clusters_, window_;
  double decay_;
  bool shared_qk_;
  Tensor centroids_;
};

}  // namespace eng
