// Relative positional encoding of Transformer-XL (Dai et al. 2019, §3.3), for one attention layer. The score
// of query i against key j, with the paper's four terms (it numbers no equations):
//
//   A_ij = (q_i + u)ᵀ k_j  +  (q_i + v)ᵀ W_{k,R} R_{i-j}          [(a) + (c)]  +  [(b) + (d)]
//
// R_d is the sinusoid of Vaswani et al. §3.5 at the distance d = i - j (sin and cos interleaved, where the paper
// concatenates them: the order of the features is immaterial, W_{k,R} mixes them), W_{k,R} a [d_model, d_model]
// projection without bias, u and v learned [H, Dh], N(0, 0.02) as the paper's code initialises them. Each layer has
// its own u and v (the paper's code shares them across layers unless --untie_r). Nothing is added to the token
// embeddings. The multi-head layer hands q + u to the mechanism as its queries and the second term, scaled by
// 1/sqrt(Dh) like the first, as an additive mask.bias [B, H, Lq, Lk]: any mechanism that adds mask.bias to its
// logits runs unchanged (those whose AttentionAccepts::bias is set). A mechanism's own `scale` option applies to
// the first term only.
//
// The bias is built without a gather. The distances of queries at absolute positions off .. off + Lq - 1 against
// keys 0 .. Lk - 1 span [off - Lk + 1, off + Lq - 1]: a table of P = Lq + Lk rows (one spare) in DESCENDING
// distance, row c for the distance off + Lq - 1 - c. BD[i, c] = (q_i + v)·W_{k,R} R_c for all c; the entry for key j
// is c = Lq - 1 - i + j, element (Lq - 1) + i (P - 1) + j of the contiguous BD: a strided view (reshape and narrow),
// the paper's "relative shift" (appendix B) with no copy. Entries at other distances (j > i + off, hidden by a causal
// mask) are finite values the mask discards.
//
// Cost per layer: W_{k,R} projects either the P table rows (P·d² + B·Lq·P·d multiply-adds for BD) or the B·Lq
// queries (B·Lq·d² + H·B·Lq·P·d): the cheaper is taken, the table when training, the queries when generating
// one token. BD is a [B, H, Lq, Lq + Lk] buffer: O(Lq·(M + Lq)) extra per head with a memory of M positions
// (Lk = M + Lq), forward, and its gradient in the backward (flash attention's bias gradient is a dense
// [B, H, Lq, Lk] buffer too).
#pragma once
#include <string>

#include "engine/rng.h"
#include "models/linear.h"

namespace eng {

// Rows of the sinusoid R for the distances d_max, d_max - 1, ..., d_max - count + 1 (negative ones included):
// [count, dim], R_d[2i] = sin(d / 10000^(2i/dim)), R_d[2i+1] = cos(...).
Tensor relative_sinusoid(int64_t d_max, int64_t count, int64_t dim, DType dtype = DType::F32);

class RelativePosition : public Module {
 public:
  RelativePosition(int64_t d_model, int64_t heads, Rng& rng);

  // q [B, H, Lq, Dh] -> q + u: the queries the mechanism sees (terms (a) + (c)).
  Tensor content_queries(const Tensor& q) const;
  // Terms (b) + (d) over 1/sqrt(Dh) for the queries q [B, H, Lq, Dh] at absolute positions query_offset ..
  // query_offset + Lq - 1 against keys 0 .. Lk - 1: [B, H, Lq, Lk], a strided view, differentiable in q, v and
  // W_{k,R}.
  Tensor position_bias(const Tensor& q, int64_t Lk, int64_t query_offset) const;

  Linear r_proj;  // W_{k,R}: [d_model, d_model], no bias
  Tensor u, v;    // [H, Dh]

 private:
  int64_t heads_, head_dim_;
};

}  // namespace eng
