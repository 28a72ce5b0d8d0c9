// Block-sparse softmax attention: the fused online-softmax kernel of ops/attention_flash.h, run over the key
// blocks a layout lists (ops/block_sparse_layout.h) instead of all of them.
//
//   out_i = sum_j softmax_j(q_i . k_j * scale + M_ij) v_j   over the keys j that the layout allows for query i
//
// q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] -> [B, H, Lq, Dv]; the layout has 1 head (shared) or H.
// Forward: per (batch, head, query block) an online softmax over the listed key blocks, each tile masked
// element-wise by the layout's bits; it saves only the output and the per-row logsumexp. Backward recomputes the
// tiles from the logsumexp (FlashAttention's equations); dK and dV walk the layout's columns, dQ its rows.
//
// Cost, with w the keys a query sees (rounded up to whole blocks): time O(B H Lq w D), extra memory O(B H Lq)
// plus a few block x block tiles per thread: never an Lq x Lk buffer. Mask: causal, query_offset, key_lengths and
// ALiBi are applied on the fly (attention_key_end), on top of the layout; dense keep and bias masks are refused
// (they are Lq x Lk; put the pattern in the layout). A query that sees no key outputs zeros and gets zero
// gradient. Gradients flow to q, k and v. Results do not depend on the thread count.
#pragma once
#include <memory>

#include "engine/tensor.h"
#include "ops/attention_mask.h"
#include "ops/block_sparse_layout.h"

namespace eng {

Tensor block_sparse_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                              const std::shared_ptr<const BlockSparseLayout>& layout, double scale);

}  // namespace eng
