// Adaptive-span attention (Sukhbaatar, Grave, Bojanowski, Joulin 2019, "Adaptive Attention Span in Transformers",
// arXiv 1905.07799): softmax attention whose weights are scaled by a soft mask of the query-key distance,
// one learned span z_h per head,
//
//   m_z(x) = min(max((R + z - x) / R, 0), 1),   a_ij = m(x_ij) e^{s_ij} / Σ_k m(x_ik) e^{s_ik},   out_i = Σ_j a_ij v_j
//
// with s = q·k · scale and x_ij = i + query_offset - j (causal) or |i + query_offset - j| (not causal). m is 1 up to
// distance z, falls linearly to 0 over the ramp R, and is 0 beyond z + R: those keys are never visited, so a query
// needs at most w = ceil(z + R) keys (causal; 2w - 1, both sides, when not causal). The kernel is FlashAttention's
// online softmax (ops/attention_flash.h) restricted to that band: each block of 64 queries multiplies against the
// union of its rows' windows (at most w + 63 keys) in 64-key tiles through the GEMM, the weights are m·e^{s - max},
// and no key outside that union is read. It saves the output and the per-row log-normaliser L_i = log Σ_k m e^{s_ik};
// the backward recomputes each tile. The scalar reference reads exactly each row's window.
//
// Gradients: with P_ij = m e^{s_ij - L_i}, dS = P (dP - D_i) (dP = dO Vᵀ, D_i = dO_i·O_i) as for softmax, and
// since m enters a_ij as the additive logit log m, ∂loss/∂z_h = Σ dS_ij ∂(log m)/∂z = Σ_{z < x < z+R} e^{s_ij - L_i}
// (dP_ij - D_i) / R (dm/dz = 1/R on the ramp, 0 elsewhere; at the two kinks the one-sided 0 is taken). z may be any
// finite value here (z <= -R hides every key); clamping it to [0, S] is the caller's business.
//
// Cost, per (batch, head), N queries, w = ceil(max(z, 0) + R) (2w - 1 when not causal): time O(N·(w + 64)·D), forward
// and backward; memory beyond the inputs O(N·Dv) for the output plus O(N) for L, and a few 64 x 64 tiles per thread.
// Never an N x N buffer. Threads: the forward over (batch, head, query block), the backward over (batch, head);
// results do not depend on the thread count.
//
// Masks (ops/attention_mask.h): causal, query_offset, key_lengths. keep, bias and ALiBi are refused. A query that sees
// no key outputs zeros and gets zero gradient, never NaN.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/tensor.h"
#include "ops/attention_mask.h"

namespace eng {

// q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv], z [H] (q's dtype) -> [B, H, Lq, Dv]; ramp R > 0. Differentiable
// in q, k, v and z (op `adaptive_span_attention`). reference = true runs the plain scalar loops (one query, one key
// at a time, double accumulators) that the tiled kernel is tested against.
Tensor adaptive_span_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& z,
                               const AttentionMask& mask, double scale, double ramp, bool reference = false);

// The soft mask m_z(x) at distance x >= 0. Evaluated as ((R + z) - x) / R, the same expression that sets the reach.
inline double adaptive_span_mask(double x, double z, double ramp) {
  return std::min(std::max(((ramp + z) - x) / ramp, 0.0), 1.0);
}

// The largest distance x with m_z(x) > 0 (R + z - x > 0, x integer), at most `cap`; -1 when no distance has one.
inline int64_t adaptive_span_reach(double z, double ramp, int64_t cap) {
  const double r = ramp + z;
  if (!(r > 0)) return -1;
  return int64_t(std::min(std::ceil(r) - 1, double(cap)));
}

}  // namespace eng
