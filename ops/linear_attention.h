// Linear attention kernels (Katharopoulos et al. 2020), with the feature map fused in so that no feature
// tensor, state sequence or N×N buffer is ever stored:
//
//   out_i = φ(q_i)ᵀ S / (φ(q_i)ᵀ z + eps),  S = Σ_j φ(k_j) v_jᵀ,  z = Σ_j φ(k_j)            (Eq. 4–6)
//   causal: S_i = Σ_{j<=i} φ(k_j) v_jᵀ,  z_i = Σ_{j<=i} φ(k_j)                              (Eq. 9–12)
//
// q [B, H, N, M], k [B, H, L, M], v [B, H, L, Dv] -> [B, H, N, Dv] (causal: L = N). Keys j >= key_lengths[b]
// are padding: their φ(k_j) is zeroed AFTER the feature map (elu(0) + 1 = 1, so zeroing k would leak).
// eps is added to the denominator after the dot product: φ(q_i)ᵀ z + eps (> 0 for the non-negative maps).
//
// Cost per head: O(N·M·Dv) time. Causal: computed in chunks of C = 56 positions, so most of the work is
// GEMM; extra memory O(C·C + M·Dv) per thread plus the denominators (N floats per head), in forward AND
// backward (there N more per head: the prefix pass leaves each row's gradient scalar for the suffix pass): the
// backward is the paper's Algorithm 1, a prefix pass for ∇q and a suffix pass for ∇k, ∇v, never materialising the
// N states. Non-causal: whole-sequence GEMMs over per-thread buffers of the head's
// features and values, O(N·(M + Dv)) while the head runs.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace eng {

// The elementwise feature maps the kernels apply themselves; others (polynomial, random features) are
// computed with ordinary ops and passed in with Identity.
enum class LinearFeature {
  Identity,    // φ(x) = x (q and k are already features)
  EluPlusOne,  // φ(x) = elu(x) + 1 (Eq. 7)
  Relu,        // φ(x) = max(x, 0)
};

struct LinearAttentionArgs {
  LinearFeature feature = LinearFeature::EluPlusOne;
  double eps = 1e-6;
  std::vector<int64_t> key_lengths;  // per batch element; empty = no padding
};

// Non-causal: op "linear_attention".
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionArgs& args = {});

// Causal (query i sees keys j <= i): op "causal_linear_attention".
Tensor causal_linear_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                               const LinearAttentionArgs& args = {});

// Recurrent form (Eq. 16–20), for generation; no gradient. q [B, H, 1, M]; when k [B, H, 1, M] and
// v [B, H, 1, Dv] are given (defined), s [B, H, M, Dv] += φ(k) vᵀ and z [B, H, M] += φ(k) first; then
// returns φ(q)ᵀ s / (φ(q)ᵀ z + eps) as [B, H, 1, Dv]. Without k and v it only reads the state (cross-
// attention over a fixed memory). s and z are contiguous, zero at the start, of q's dtype, or f64 for an f32 q on
// the CPU: then the state and every sum are kept in double. A feature map with signed features (poly2's √2·x and
// x_i·x_j) sums terms that cancel: in f32 the separately rounded numerator and denominator of a query that gives
// its keys weights near 0 (1 + qᵀk ≈ 0) lose most of their digits (6e-4 at position 0 against the parallel form,
// whose one product per key serves both), so models/attention/linear.cpp keeps such states in f64.
Tensor linear_attention_step(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& s, Tensor& z,
                             const LinearAttentionArgs& args = {});

}  // namespace eng
