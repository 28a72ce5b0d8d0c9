// Synthesizer (Tay, Bahri, Metzler, Juan, Zhao, Zheng 2020, "Synthesizer: Rethinking Self-Attention in
// Transformer Models", arXiv 2005.00743), the `synthesizer` variant: the attention weights are synthesised
// without query–key dot products.
//
//   dense  (Eq. 1–3): B_i = F(x_i) = W2 σ_R(W1 x_i + b1) + b2 ∈ R^{max_len},   out = softmax(B[:, :Lk]) V
//   random (Eq. 4):   out = softmax(R[:Lq, :Lk]) V,  R ∈ R^{max_len × max_len} learned (or fixed)
//
// per head h: W1 [D, D], b1 [D], W2 [D, max_len], b2 [max_len] (dense); R [max_len, max_len] (random). The
// paper feeds the layer input X_i to F; our mechanism interface hands the variant q = X W^Q of the head
// (models/multihead.h), so x_i here is the head's projected query q_i (one extra linear map in front of W1).
// Keys are not used at all (k only fixes Lk and is shape-checked); v is the paper's G(X).
//
// Cost per head: dense O(Lq·D·(D + max_len) + Lq·Lk·Dv) time, O(Lq·max_len) memory (the synthesised logits);
// random O(Lq·Lk·Dv) time, O(Lq·Lk) memory; parameters H·(D² + D·max_len + D + max_len) or H·max_len².
// Needs max_len (refused if 0) and Lq, Lk ≤ max_len (random: query i uses row i of R; dense: key j column j).
//
// Masks: all of them through the dense additive mask (ops/attention_mask.h): causal, key padding and keep by
// −inf logits (a fully masked row outputs zeros), bias and ALiBi added to the synthesised logits.
// Options: kind = dense | random (default dense); fixed = true | false (random only, default false: with true,
// R is a buffer drawn once from the seed and never trained). Init: W1, b1, W2, b2 as nn.Linear
// (U(±1/√D)); R ~ N(0, 1).
//
// Recurrent form: a cache of values only (softmax.h's kv_cache_step with keys = false: keys are never read). Step t
// computes row t of the synthesised logits restricted to j <= t (dense: B_t from q_t, its first t + 1 entries;
// random: R[t, 0 .. t]) and averages the cached values: O(D·(D + max_len) + t·Dv) (dense) or O(t·Dv) (random) per
// step and head, O(G·t·Dv) memory for G K/V groups; t < max_len.
#pragma once
#include <memory>
#include <string>

#include "models/attention/attention.h"

namespace eng {

class SynthesizerAttention : public Attention {
 public:
  enum class Kind { Dense, Random };

  explicit SynthesizerAttention(const AttentionConfig& config);
  std::string name() const override { return "synthesizer"; }
  std::unique_ptr<AttentionState> new_state() const override;

  Kind kind() const { return kind_; }
  // dense: w1 [H, D, D], b1 [H, 1, D], w2 [H, D, max_len], b2 [H, 1, max_len] (x · W convention: B = σ(q W1 + b1) W2
  // + b2); random: r [H, max_len, max_len].
  const Tensor& w1() const { return w1_; }
  const Tensor& b1() const { return b1_; }
  const Tensor& w2() const { return w2_; }
  const Tensor& b2() const { return b2_; }
  const Tensor& r() const { return r_; }

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  Kind kind_;
  int64_t heads_, head_dim_, max_len_;
  Tensor w1_, b1_, w2_, b2_, r_;
};

}  // namespace eng
