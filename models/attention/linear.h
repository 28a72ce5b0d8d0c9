// Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"), the `linear` variant, and its
// causal form `causal-linear` (models/attention/causal_linear.cpp):
//
//   V'_i = φ(Q_i)ᵀ Σ_j φ(K_j) V_jᵀ / (φ(Q_i)ᵀ Σ_j φ(K_j) + eps)                          (Eq. 4–6)
//   causal: the sums run over j <= i, kept as S_i = S_{i-1} + φ(K_i) V_iᵀ, Z_i = Z_{i-1} + φ(K_i)  (Eq. 9–12)
//
// Cost per head, with M = feature dim: O(N·M·Dv) time; O(N·Dv) memory beyond inputs and outputs (the kernels
// in ops/linear_attention.h fuse the elementwise feature maps and never store per-position states).
// Options: feature_map = elu (elu+1, Eq. 7, default) | relu | poly2 | any registered map
// (models/attention/feature_map.h); eps = the denominator's additive constant (default 1e-6).
// Masks: causal (query i sees keys j <= i) and key padding; dense keep/bias masks and ALiBi have no linear
// form and are refused.
//
// Recurrent form (Eq. 16–20): step() keeps s [B, H, M, Dv] and z [B, H, M] and costs O(M·Dv) per token,
// whatever the position. Cross-attention over a fixed memory digests the memory into (s, z) once.
#pragma once
#include <memory>
#include <string>

#include "models/attention/attention.h"
#include "models/attention/feature_map.h"

namespace eng {

struct LinearState : AttentionState {
  ENG_TYPE_TAG(LinearState, AttentionState)
  Tensor s, z;  // [B, H, M, Dv], [B, H, M]; undefined before the first step
};

class LinearAttention : public Attention {
 public:
  ENG_TYPE_TAG(LinearAttention, Attention)
  // always_causal: the `causal-linear` variant, causal whatever the mask says.
  LinearAttention(const AttentionConfig& config, bool always_causal);
  std::string name() const override { return always_causal_ ? "causal-linear" : "linear"; }
  std::unique_ptr<AttentionState> new_state() const override;
  std::unique_ptr<AttentionState> memory_state(const Tensor& k, const Tensor& v,
                                               const AttentionMask& mask) const override;
  Tensor attend_state(const Tensor& q, const AttentionState& state) const override;

  const FeatureMap& feature_map() const { return *phi_; }
  double eps() const { return eps_; }

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  bool always_causal_;
  std::unique_ptr<FeatureMap> phi_;
  double eps_;
};

}  // namespace eng
