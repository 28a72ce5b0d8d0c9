#include "models/attention/clustered.h"

#include <algorithm>

#include "engine/error.h"
#include "ops/matmul.h"
#include "ops/softmax.h"

namespace eng {

ENG_REGISTER_ATTENTION("clustered",
                       "clustered attention (Vyas et al. 2020): queries hashed and K-means clustered, softmax "
                       "attention once per centroid, O(N*C), non-causal",
                       [](const AttentionConfig& c) { return std::make_unique<ClusteredAttention>(c); });

void check_clustered_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                            const std::string& variant, bool causal_ok) {
  const std::string op = variant + " attention";
  check_qkv(q, k, v, op.c_str());
  check_attention_mask(mask, q.size(0), q.size(1), q.size(2), k.size(2), q.dtype(), op.c_str());
  ENG_CHECK(causal_ok || !mask.causal, op,
            ": causal masks are not supported (a centroid mixes queries at different positions; use "
            "causal-improved-clustered), got q ",
            q.shape(), " and k ", k.shape());
  ENG_CHECK(!mask.keep.defined() && !mask.bias.defined() && !mask.alibi_slopes.defined(), op,
            ": keep, bias and ALiBi masks are not supported (they are per query, a centroid stands for many); only ",
            causal_ok ? "causal and key_lengths are" : "key_lengths is", " (q ", q.shape(), ", k ", k.shape(), ")");
}

ClusteredAttention::ClusteredAttention(const AttentionConfig& config)
    : QueryClusteredAttention(config, "clustered") {
  ENG_CHECK(!config.causal,
            "attention 'clustered': has no causal form (a centroid mixes queries at different positions); use "
            "causal-improved-clustered in decoders");
}

Tensor ClusteredAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  check_clustered_inputs(q, k, v, mask, "clustered", false);
  const int64_t N = q.size(2), C = std::min(num_clusters(), N);
  const std::vector<int64_t> ids = forward_clusters(q);
  if (N == 0) return zeros({q.size(0), q.size(1), 0, v.size(3)}, q.dtype());
  const Tensor ac = softmax(centroid_logits(cluster_centroids(q, ids, C), k, mask), -1);  // Eq. 4; all padded: 0
  return broadcast_clusters(matmul(ac, v), ids, N);                                        // Eq. 5–6
}

}  // namespace eng
