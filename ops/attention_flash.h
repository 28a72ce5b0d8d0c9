// FlashAttention (Dao et al. 2022) on the CPU: softmax attention without the Lq x Lk matrix.
//
//   out = softmax(q k^T * scale + mask) v,   q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] -> [B, H, Lq, Dv]
//
// Forward: each block of 64 queries walks the key blocks (64 keys) with an online softmax: per query row a
// running max m and sum l of exponentials, the unnormalised output rescaled by exp(m_old - m_new) whenever m
// grows. It saves only the output O and the per-row logsumexp L = m + log l. Backward recomputes each
// probability tile P = exp(S - L) from L: D_i = rowsum(dO_i * O_i), dS = P * (dP - D_i) with dP = dO V^T,
// dQ = dS K scale, dK = dS^T Q scale, dV = P^T dO.
//
// Cost, with N = Lq = Lk: time O(B H N^2 D) -- 2 tile products forward, 5 backward when there are at least
// 4 heads (B H) per thread, else 7 (key blocks and query blocks then run as two parallel passes, so that no two
// tasks add into the same rows; the results are bitwise the same either way). Causal masking skips key blocks
// entirely after the diagonal, about half the work. Extra memory O(B H N) for L and D_i plus a few 64 x 64
// tiles per thread, forward and backward: never an Lq x Lk buffer. One exception: a bias that requires grad gets
// its gradient through a dense [B, H, Lq, Lk] buffer (the size of the gradient that was asked for).
//
// Mask (ops/attention_mask.h): causal, query_offset, key_lengths and ALiBi are computed on the fly; keep and
// bias are read element-wise through broadcast strides. A query that sees no key outputs zeros and gets zero
// gradient. Gradients flow to q, k, v and mask.bias; keep, key_lengths and alibi_slopes are constants.
// q, k, v need contiguous rows (last axis) only; other strides are read in place (a KV cache view is not copied).
// Under a bf16 PrecisionScope (ops/mixed_precision.h) the tile products, forward and backward, are bf16 products
// with f32 accumulation; the online softmax, L, D_i and dS stay f32.
#pragma once
#include "engine/tensor.h"
#include "ops/attention_mask.h"

namespace eng {

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale);

}  // namespace eng
