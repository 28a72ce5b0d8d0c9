// Adaptive attention span (Sukhbaatar, Grave, Bojanowski, Joulin 2019, "Adaptive Attention Span in Transformers",
// arXiv 1905.07799), the `adaptive-span` variant: softmax attention with the paper's soft mask m_z of the query-key
// distance x and its masked weights a_tr, one learned span z_h per head (equation numbers not confirmed: see
// docs/attention/adaptive-span.md),
//
//   m_z(x) = min(max((R + z - x) / R, 0), 1),    a_ij = m(x_ij) e^{s_ij} / Σ_k m(x_ik) e^{s_ik},    s = q·k / √D
//
// and the paper's ℓ1 span penalty λ/H Σ_h z_h, returned by penalty() for the caller to add to the loss (Sukhbaatar
// et al. sum λ/M Σ z over all heads of all layers, M heads per layer: the sum of every layer's penalty()). The kernel
// is ops/adaptive_span_attention.h: keys beyond z + R (beyond the union of a 64-query block's windows) are never read.
//
// The parameter `span` [H] holds z_h / S (the reference implementation's parameterisation), so that an optimizer step
// of size lr moves a span by about lr·S positions; with z in positions, Adam at lr 1e-3 would move it by 1e-3 of a
// position per step. z_h = S · clamp(span_h, 0, 1) in the forward, with the clamp's gradient passed straight through
// (an optimizer step that leaves [0, 1] can come back: a zero gradient there would trap it); the penalty uses the
// plain clamp, so it never drives a span below 0.
//
// Cost per (batch, head), N queries: O(N·(ceil(max_h z_h) + R + 64)·D) time (twice the span when not causal),
// forward and backward; O(N·D) memory beyond the inputs, never an N x N buffer. Masks: causal, query_offset,
// key_lengths; keep, bias and ALiBi are refused. The distance is i + query_offset - j (causal) or its absolute
// value (not causal).
//
// Options: max_span = S, in positions (default 256, >= 1); ramp = R, in positions (default 32, > 0); init = the initial
// z of every head, in positions (default 0, as the reference implementation starts its spans; in [0, S]); penalty = λ
// (default 2e-6, >= 0); scale = the logit scale (default 1/√D); impl = tiled | reference (the scalar loops).
//
// Recurrent form: step() keeps the last ceil(S + R) keys and values in a buffer of at most twice that many positions
// (slid back when full), so memory per layer is constant in the generated length and each token costs
// O((z + R)·D); its rows equal the causal parallel form's.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/attention/attention.h"

namespace eng {

// The last positions of k [B, H, ., D] and v [B, H, ., Dv]: slots 0 .. stored hold positions start .. start + stored.
struct AdaptiveSpanState : AttentionState {
  Tensor k, v;
  int64_t start = 0, stored = 0;
  int64_t capacity() const { return k.defined() ? k.size(2) : 0; }
};

class AdaptiveSpanAttention : public Attention {
 public:
  explicit AdaptiveSpanAttention(const AttentionConfig& config);
  std::string name() const override { return "adaptive-span"; }
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  std::unique_ptr<AttentionState> new_state() const override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;
  // λ/H Σ_h z_h, a scalar differentiable in `span` (zero gradient for a span outside [0, 1]).
  Tensor penalty() const override;

  const Tensor& span() const { return span_; }  // [H]: z_h / S
  std::vector<double> spans() const;            // z_h in positions, clamped to [0, S]
  int64_t cache_positions() const;              // ceil(S + R): the keys step() keeps

 private:
  int64_t heads_;
  int64_t max_span_;
  double ramp_;
  double lambda_;
  double scale_ = 0;  // 0: 1/sqrt(D)
  bool reference_ = false;
  Tensor span_;
};

}  // namespace eng
