// Efficient attention (Shen et al. 2018, "Efficient Attention: Attention with Linear Complexities"), the
// `efficient` variant: out = ρ_q(Q) (ρ_k(K)ᵀ V)  (Eq. 4), with ρ_q a softmax of each query over its D
// features and ρ_k a softmax of each key feature over the positions (Eq. 6). The D × Dv context ρ_k(K)ᵀ V is
// formed first, so the cost is O(N·D·Dv) time and O(N·D + D·Dv) memory per head, never N × N.
//
// Masks: key_lengths excludes padded keys from the position softmax. Every key enters every query's output
// through the shared context, so there is no causal form (causal masks and config.causal are refused), and
// per-(query, key) masks — keep, bias, ALiBi — have no place to act and are refused too. No options.
#pragma once
#include <string>

#include "models/attention/attention.h"

namespace eng {

class EfficientAttention : public Attention {
 public:
  explicit EfficientAttention(const AttentionConfig& config);
  std::string name() const override { return "efficient"; }
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
};

}  // namespace eng
