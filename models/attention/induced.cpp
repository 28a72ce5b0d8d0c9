#include "models/attention/induced.h"

#include <cmath>
#include <limits>
#include <vector>

#include "engine/error.h"
#include "engine/rng.h"
#include "ops/attention_flash.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/select.h"
#include "ops/softmax.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(induced, "induced",
                       "inducing-point compression (ISAB / Luna pack-unpack): m learned points pool the keys and "
                       "values, queries attend to them, O(N m), non-causal",
                       [](const AttentionConfig& c) { return std::make_unique<InducedAttention>(c); });

InducedAttention::InducedAttention(const AttentionConfig& config)
    : m_(config.options.get_int("points", 16, IntRange::at_least(1))), heads_(config.heads), head_dim_(config.head_dim) {
  accepts_.causal = false;
  accepts_.cross = true;
  accepts_.why_not = "every inducing point pools every key, and the points replace the keys that masks index";
  Rng rng(config.seed ^ 0x1d0ced);
  std::vector<double> init(size_t(heads_ * m_ * head_dim_));
  for (double& x : init) x = rng.normal() / std::sqrt(double(head_dim_));
  points_ = register_parameter("points", from_vector(init, {heads_, m_, head_dim_}, DType::F32));
}

Tensor InducedAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const int64_t H = q.size(1), N = k.size(2), D = q.size(3);
  ENG_CHECK(H == heads_ && D == head_dim_, "attention 'induced': built for ", heads_, " heads of dim ", head_dim_,
            ", got q ", q.shape());
  const double scale = 1.0 / std::sqrt(double(D));
  Tensor logits = mul_scalar(matmul(points_.to(q.dtype()), transpose(k, 2, 3)), scale);  // [B, H, m, N]
  if (!mask.key_lengths.empty()) {
    logits = masked_fill(logits, padded_keys(mask.key_lengths, N, false), -std::numeric_limits<double>::infinity());
  }
  const Tensor a = softmax(logits, -1);  // all keys padded: zeros, so every prototype is 0
  return flash_attention(q, matmul(a, k), matmul(a, v), {}, scale);
}

}  // namespace eng
