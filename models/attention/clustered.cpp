#include "models/attention/clustered.h"

#include <algorithm>

#include "engine/error.h"
#include "ops/matmul.h"
#include "ops/softmax.h"

namespace eng {

ENG_REGISTER_ATTENTION(clustered, "clustered",
                       "clustered attention (Vyas et al. 2020): queries hashed and K-means clustered, softmax "
                       "attention once per centroid, O(N*C), non-causal",
                       [](const AttentionConfig& c) { return std::make_unique<ClusteredAttention>(c); });

ClusteredAttention::ClusteredAttention(const AttentionConfig& config)
    : QueryClusteredAttention(config, "clustered") {
  accepts_.causal = false;
  accepts_.cross = true;
  accepts_.why_not = "a centroid stands for queries at many positions; causal-improved-clustered is the causal form";
}

Tensor ClusteredAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const int64_t N = q.size(2), C = std::min(num_clusters(), N);
  const std::vector<int64_t> ids = forward_clusters(q);
  if (N == 0) return zeros({q.size(0), q.size(1), 0, v.size(3)}, q.dtype());
  const Tensor ac = softmax(centroid_logits(cluster_centroids(q, ids, C), k, mask), -1);  // Eq. 4; all padded: 0
  return broadcast_clusters(matmul(ac, v), ids, N);                                        // Eq. 5–6
}

}  // namespace eng
