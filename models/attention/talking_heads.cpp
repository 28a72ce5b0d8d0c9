#include "models/attention/talking_heads.h"

#include <cmath>
#include <vector>

#include "engine/error.h"
#include "models/attention/softmax.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/softmax.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(talking_heads, "talking-heads",
                       "talking-heads attention (Shazeer et al. 2020): logits and weights mixed across heads by "
                       "learned [H, H] matrices around the softmax, O(N^2)",
                       [](const AttentionConfig& c) { return std::make_unique<TalkingHeadsAttention>(c); });

namespace {

Tensor identity(int64_t n) {
  std::vector<double> e(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) e[size_t(i * n + i)] = 1;
  return from_vector(e, {n, n});
}

// y[b, h', ...] = Σ_h p[h, h'] x[b, h, ...] for x [B, H, Lq, Lk]: one matmul of pᵀ [H, H] with x viewed as
// [B, H, Lq·Lk] (the H × H mixing applied to every (query, key) pair at once).
Tensor mix_heads(const Tensor& x, const Tensor& p) {
  const Shape shape = x.shape();
  Tensor flat = reshape(x, {shape[0], shape[1], shape[2] * shape[3]});
  return reshape(matmul(transpose(p, 0, 1), flat), shape);
}

}  // namespace

Tensor talking_heads_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& p_l,
                               const Tensor& p_w, const AttentionMask& mask, double scale) {
  check_qkv(q, k, v, "attention 'talking-heads'");
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2);
  const Shape square{H, H};
  ENG_CHECK(p_l.shape() == square && p_w.shape() == square, "attention 'talking-heads': P_l ", p_l.shape(),
            " and P_w ", p_w.shape(), " must be [", H, ", ", H, "] for q ", q.shape());
  check_attention_mask(mask, B, H, Lq, Lk, q.dtype(), "attention 'talking-heads'");
  const Tensor& keep = mask.keep;
  ENG_CHECK(!keep.defined() || keep.dim() < 3 || keep.size(keep.dim() - 3) == 1,
            "attention 'talking-heads': a keep mask must be the same for every head (P_w mixes the weights of all "
            "heads, so a key hidden from one head would return through another), got keep ", keep.shape(),
            " for q ", q.shape());
  Tensor logits = mix_heads(mul_scalar(matmul(q, transpose(k, -2, -1)), scale), p_l.to(q.dtype()));
  if (mask.any())
    logits = add(logits, dense_attention_mask(mask, B, H, Lq, Lk, q.dtype(), "attention 'talking-heads'"));
  return matmul(mix_heads(softmax(logits, -1), p_w.to(q.dtype())), v);
}

TalkingHeadsAttention::TalkingHeadsAttention(const AttentionConfig& config) : heads_(config.heads) {
  ENG_CHECK(heads_ >= 1, "attention 'talking-heads': needs heads >= 1, got ", heads_);
  scale_ = config.options.get_double("scale", 0.0, RealRange::above(0));  // 0: 1/sqrt(D)
  // Every mask is added to the mixed logits; a keep mask must be the same for every head (checked per call).
  accepts_.keep = accepts_.bias = accepts_.alibi = accepts_.query_offset = accepts_.cross = true;
  accepts_.grouped_step = true;
  p_l_ = register_parameter("P_l", identity(heads_));
  p_w_ = register_parameter("P_w", identity(heads_));
}

Tensor TalkingHeadsAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  ENG_CHECK(q.size(1) == heads_, "attention 'talking-heads': built for ", heads_, " heads, got q ", q.shape());
  const double scale = scale_ > 0 ? scale_ : 1.0 / std::sqrt(double(q.size(3)));
  return talking_heads_attention(q, k, v, p_l_, p_w_, mask, scale);
}

std::unique_ptr<AttentionState> TalkingHeadsAttention::new_state() const { return std::make_unique<KVCacheState>(); }

Tensor TalkingHeadsAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                          const AttentionMask& mask) {
  return kv_cache_step(*this, q, k, v, state, mask);
}

}  // namespace eng
