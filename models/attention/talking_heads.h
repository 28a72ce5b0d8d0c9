// Talking-heads attention (Shazeer, Lan, Cheng, Ding, Hou 2020, "Talking-Heads Attention", arXiv 2003.02436),
// the `talking-heads` variant. The paper gives it as einsum pseudo-code (its Section 4 listing, no numbered
// equations): per (query i, key j) the H dot-product logits are mixed across heads by a learned P_l [H, H]
// before the softmax, and the H attention weights mixed again by P_w [H, H] after it:
//
//   J_h = q_h k_hᵀ · scale                       "dot-product logits"
//   L_h' = Σ_h J_h P_l[h, h'] + mask_h'          "talking-heads projection" of the logits, then the mask
//   W_h' = softmax_j(L_h')
//   U_h = Σ_h' W_h' P_w[h', h]                   "talking-heads projection" of the weights
//   out_h = U_h v_h
//
// The mask (causal, key padding, keep, bias, ALiBi) is added AFTER the logits mixing: mixed before, a −inf of
// one head would reach every head it is mixed into (−inf·0 = NaN, −inf·(negative) = +inf), and a finite bias
// of one head would leak into the others. Causal and padding masks are the same for every head, so the
// weights' zeros survive the P_w mixing and the masks hold for the output; a keep mask that differs between
// heads would not (P_w would bring a hidden key back through another head), so keep must broadcast over heads.
// Bias and ALiBi are per-head additive logits terms and act on the mixed logits.
//
// P_l and P_w are initialised to the identity, so a fresh layer is softmax attention (ops/attention_naive.h).
// Cost: it is full attention, O(H·Lq·Lk·D + H²·Lq·Lk) time and O(H·Lq·Lk) memory (logits and weights are
// materialised; the mixing needs every head's row at once), forward and backward by autograd.
//
// Options: scale = the logit scale (default 1/√D).
//
// Recurrent form: a KV cache (softmax.h's kv_cache_step). Row t mixes the H heads' logits of keys 0 .. t, which
// every head's cache holds, so step t runs the formula above on the new query against the cache: O(H·t·D + H²·t)
// per step, O(G·t·D) memory for G K/V groups (grouped-query K/V are repeated to H for the mixing).
#pragma once
#include <memory>
#include <string>

#include "models/attention/attention.h"

namespace eng {

// The formula above with explicit mixing matrices p_l, p_w [H, H]; differentiable in all of q, k, v, p_l, p_w.
Tensor talking_heads_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& p_l,
                               const Tensor& p_w, const AttentionMask& mask, double scale);

class TalkingHeadsAttention : public Attention {
 public:
  explicit TalkingHeadsAttention(const AttentionConfig& config);
  std::string name() const override { return "talking-heads"; }
  std::unique_ptr<AttentionState> new_state() const override;

  const Tensor& p_l() const { return p_l_; }
  const Tensor& p_w() const { return p_w_; }

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  int64_t heads_;
  double scale_ = 0;  // 0: 1/sqrt(D)
  Tensor p_l_, p_w_;
};

}  // namespace eng
