// Clustered attention (Vyas, Katharopoulos, Fleuret 2020, "Fast Transformers with Clustered Attention", arXiv
// 2007.04825, Sec. 3.2), the `clustered` variant: the queries are grouped into C clusters (hashing + Hamming K-means,
// models/attention/query_clustering.h) and attention is computed once per cluster, for its centroid:
//
//   Q^c_j = Σ_i S_ij Q_i / Σ_i S_ij            centroid of cluster j (S the one-hot membership)   (Eq. 3)
//   A^c   = softmax(Q^c Kᵀ / √D)               [C, Lk]                                            (Eq. 4)
//   V̂^c  = A^c V,   V̂_i = V̂^c_{j(i)}          each query gets its cluster's row                   (Eq. 5–6)
//
// (equation numbers as recalled from arXiv v2, not confirmed against a stored copy: docs/attention/clustered.md). The clustering is
// a constant (not differentiated, as in the paper); the output is differentiable wrt q (through the centroids), k
// and v. Cost per head: O(N·C·(D + Dv)) time for the centroids, A^c and V̂^c, plus the clustering; O(C·(N + Lk))
// memory (the membership S [C, N] and A^c [C, Lk]); never N × Lk.
//
// Options: clusters (default 100, capped at N), iterations (10), bits (32), hash_bias (true), redraw (every-call |
// fixed) — see query_clustering.h. Masks: key padding only. A centroid mixes queries at different positions, so
// there is no causal form (config.causal and causal masks are refused; use causal-improved-clustered); keep, bias
// and ALiBi are refused. No recurrent form.
#pragma once
#include <string>

#include "models/attention/query_clustering.h"

namespace eng {

class ClusteredAttention : public QueryClusteredAttention {
 public:
  explicit ClusteredAttention(const AttentionConfig& config);
  std::string name() const override { return "clustered"; }
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
};

}  // namespace eng
