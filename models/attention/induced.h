// Inducing-point compression, the `induced` variant: m learned points per head first attend over the keys
// ("pack", as Set Transformer's ISAB, Lee et al. 2019, arXiv 1810.00825, Eq. 9–10, and Luna's pack attention,
// Ma et al. 2021, arXiv 2106.01540), and the queries then attend over what the points gathered ("unpack"):
//
//   A   = softmax_j(I_h Kᵀ / √D)                         [m, N], each point's weights over the keys
//   K̃   = A K,   Ṽ = A V                                 [m, D], [m, Dv]: m prototype keys and values
//   out = softmax(Q K̃ᵀ / √D) Ṽ
//
// Reduced to the attention interface: the points pool the layer's own keys and values with one set of weights,
// where ISAB and Luna pass the pack output through a residual, a feed-forward block and fresh key/value
// projections. The cost is that of a rank-m attention whose prototypes follow the content (unlike Linformer's
// fixed projection): O(N·m·D) time and O(N·m) memory per head.
//
// Masks: key padding gets weight 0 in A (−inf logits). Every prototype mixes every key, so there is no causal
// form (config.causal and causal masks are refused), and keep, bias and ALiBi are refused (they index keys that
// the prototypes replace). Options: points = m (default 16). Parameter: "points" [H, m, D], N(0, 1/D) at start.
// No recurrent form.
#pragma once
#include <string>

#include "models/attention/attention.h"

namespace eng {

class InducedAttention : public Attention {
 public:
  explicit InducedAttention(const AttentionConfig& config);
  std::string name() const override { return "induced"; }
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;

 private:
  int64_t m_, heads_, head_dim_;
  Tensor points_;
};

}  // namespace eng
