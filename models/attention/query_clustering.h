// Query clustering shared by the clustered attentions (Vyas, Katharopoulos, Fleuret 2020, "Fast Transformers with
// Clustered Attention", arXiv 2007.04825, Sec. 3.2.1): queries are hashed by `bits` random hyperplanes and the
// codes grouped by K-means (Lloyd) in Hamming space, as the fast-transformers library does
// (hashing/hash_cpu.cpp, clustering/hamming/cluster_cpu.cpp).
//
//   hash     bit b of x is [x·a_b > β_b], with a_b ~ N(0, I_D) and β_b ~ N(0, 1) (β_b = 0 when hash_bias=false)
//   init     the C centroids start as the codes of positions 0 … C−1 (C = min(clusters, N))
//   Lloyd    iterations−1 times: assign, then recompute; then a final assign (the library's count)
//   assign   the centroid at the smallest Hamming distance; ties go to the LOWER centroid index
//   update   bit b of a centroid is 1 iff strictly more than half of its members have bit b set (a tie gives 0);
//            an empty cluster keeps its centroid (the library draws a random one; we stay deterministic)
//
// Cost per head: O(N·bits·D) to hash, O(iterations·N·C) popcounts and O(iterations·N·bits) bit counts to cluster.
//
// Options read here: clusters (default 100), iterations (default 10), bits (1 … 64, default 32), hash_bias
// (default true), redraw = every-call | fixed (default every-call). The planes of a call are a pure function of
// (config.seed, draw), draw = the call index (every-call) or 0 (fixed); the call index is kept in the buffer
// "hash_calls" and advances once per training forward, so set_call() replays a call's clusters exactly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/attention/attention.h"

namespace eng {

// Hamming distance |a xor b|.
int hamming_distance(uint64_t a, uint64_t b);
// For each code, the index of the nearest centroid (ties: the lower index).
std::vector<int64_t> hamming_assign(const std::vector<uint64_t>& codes, const std::vector<uint64_t>& centroids);
// The majority-bit centroid of each cluster's members over `bits` bits; an empty cluster keeps `previous`.
std::vector<uint64_t> hamming_centroids(const std::vector<uint64_t>& codes, const std::vector<int64_t>& ids,
                                        const std::vector<uint64_t>& previous, int bits);
// Lloyd in Hamming space as above: cluster ids in [0, C) of the codes, C = min(clusters, codes.size()).
std::vector<int64_t> hamming_kmeans(const std::vector<uint64_t>& codes, int64_t clusters, int64_t iterations,
                                    int bits);

// Centroids Q^c = S q, S[c, i] = 1 / |cluster c| for the queries i of cluster c (ids row-major [B·H·N], C
// clusters): [B, H, C, D], differentiable wrt q. An empty cluster gets a zero centroid (no query reads it).
Tensor cluster_centroids(const Tensor& q, const std::vector<int64_t>& ids, int64_t C);
// Q^c Kᵀ / √D with padded keys (mask.key_lengths) at −inf: [B, H, C, Lk].
Tensor centroid_logits(const Tensor& centroids, const Tensor& k, const AttentionMask& mask);
// Row ids[i] of x [B, H, C, F] for every query i: [B, H, N, F] (the gradient sums back into the clusters).
Tensor broadcast_clusters(const Tensor& x, const std::vector<int64_t>& ids, int64_t N);

// The clustering state and options of a clustered attention variant: the base of clustered, improved-clustered and
// causal-improved-clustered.
class QueryClusteredAttention : public Attention {
 public:
  QueryClusteredAttention(const AttentionConfig& config, const std::string& variant);

  // The call index the next forward clusters with; a training forward then advances it by one.
  int64_t call() const { return calls_.data<int64_t>()[0]; }
  void set_call(int64_t call);
  // Hyperplanes of call `call`: [bits, D + 1] f64, row b = (a_b, β_b).
  Tensor planes(int64_t call, int64_t head_dim) const;
  // Hash codes of q [B, H, N, D] under the planes of `call`: B·H·N codes, row-major.
  std::vector<uint64_t> codes(const Tensor& q, int64_t call) const;
  // Cluster ids of q [B, H, N, D] for call `call` (default: call()): [B, H, N] i64 in [0, min(clusters, N)).
  Tensor clusters(const Tensor& q, int64_t call) const;
  Tensor clusters(const Tensor& q) const { return clusters(q, call()); }

  int64_t num_clusters() const { return clusters_; }
  int64_t iterations() const { return iterations_; }
  int bits() const { return bits_; }
  bool hash_bias() const { return hash_bias_; }

 protected:
  // The ids of a forward, row-major [B·H·N], and the call counter advanced when training (after the caller's
  // checks have passed).
  std::vector<int64_t> forward_clusters(const Tensor& q);
  // The call index of a forward, the counter advanced when training.
  int64_t forward_call();
  std::vector<int64_t> cluster_ids(const Tensor& q, int64_t call) const;

  std::string variant_;

 private:
  int64_t clusters_, iterations_;
  int bits_;
  bool hash_bias_;
  bool fixed_;  // redraw=fixed: every call uses draw 0
  uint64_t seed_;
  Tensor calls_;  // [1] i64 buffer "hash_calls": the next call index
};

}  // namespace eng
