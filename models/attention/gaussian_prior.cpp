#include "models/attention/gaussian_prior.h"

#include <cmath>
#include <vector>

#include "engine/error.h"
#include "models/attention/softmax.h"
#include "ops/attention_naive.h"
#include "ops/binary.h"
#include "ops/unary.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(gaussian_prior, "gaussian-prior",
                       "softmax attention plus a learned Gaussian locality prior -(i-j)^2/(2 sigma_h^2) on the logits "
                       "(Yang et al. 2018), O(N^2)",
                       [](const AttentionConfig& c) { return std::make_unique<GaussianPriorAttention>(c); });

Tensor gaussian_prior_bias(const Tensor& log_sigma, int64_t Lq, int64_t Lk, int64_t query_offset) {
  ENG_CHECK(log_sigma.dim() == 1, "gaussian_prior_bias: log_sigma must be [H], got ", log_sigma.shape());
  const int64_t H = log_sigma.size(0);
  std::vector<double> d2(size_t(Lq * Lk));
  for (int64_t i = 0; i < Lq; ++i)
    for (int64_t j = 0; j < Lk; ++j) {
      const double d = double(i + query_offset - j);
      d2[size_t(i * Lk + j)] = d * d;
    }
  // −1 / (2σ²) = −exp(−2 log σ) / 2, per head
  const Tensor coef = mul_scalar(exp(mul_scalar(log_sigma, -2.0)), -0.5);
  return mul(from_vector(d2, {1, 1, Lq, Lk}, log_sigma.dtype()), reshape(coef, {1, H, 1, 1}));
}

GaussianPriorAttention::GaussianPriorAttention(const AttentionConfig& config) : heads_(config.heads) {
  const double sigma = config.options.get_double("sigma", 8.0, RealRange::above(0));  // positions
  scale_ = config.options.get_double("scale", 0.0, RealRange::above(0));            // 0: 1/sqrt(D)
  ENG_CHECK(heads_ >= 1, "attention 'gaussian-prior': needs heads >= 1, got ", heads_);
  log_sigma_ = register_parameter("log_sigma", full({heads_}, std::log(sigma)));
  accepts_.keep = accepts_.bias = accepts_.alibi = accepts_.query_offset = accepts_.cross = true;
  accepts_.grouped_step = true;
}

Tensor GaussianPriorAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  ENG_CHECK(q.size(1) == heads_, "attention 'gaussian-prior': built for ", heads_, " heads, got q ", q.shape());
  AttentionMask m = mask;
  const Tensor g = gaussian_prior_bias(log_sigma_.to(q.dtype()), q.size(2), k.size(2), mask.query_offset);
  m.bias = mask.bias.defined() ? add(mask.bias, g) : g;
  const double scale = scale_ > 0 ? scale_ : 1.0 / std::sqrt(double(q.size(3)));
  return naive_attention(q, k, v, m, scale);
}

std::unique_ptr<AttentionState> GaussianPriorAttention::new_state() const { return std::make_unique<KVCacheState>(); }

Tensor GaussianPriorAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                          const AttentionMask& mask) {
  return kv_cache_step(*this, q, k, v, state, mask);
}

}  // namespace eng
