// Transformer-XL's segment-level recurrence (Dai et al. 2019, §3.2). A long text is read as consecutive segments;
// layer n of segment τ+1 takes its keys and values from its input extended by the memory of what entered the same
// layer at the last M positions before the segment (the paper's unnumbered display of §3.2, with SG = stop-gradient
// and ∘ = concatenation along positions):
//
//   h̃^{n-1}_{τ+1} = [SG(m^{n-1}_τ) ∘ h^{n-1}_{τ+1}]
//   q^n, k^n, v^n = h^{n-1}_{τ+1} W_qᵀ,  h̃^{n-1}_{τ+1} W_kᵀ,  h̃^{n-1}_{τ+1} W_vᵀ
//
// and the memory then keeps the last M rows of h̃^{n-1}_{τ+1} ("a predefined length-M old hidden states spanning
// (possibly) multiple segments", §3.2), with causal attention whose query i sits at position M + i among the keys (AttentionMask::query_offset = M).
// No gradient reaches a previous segment: the memory is stored detached. Positions must be relative (relative,
// rotary, alibi or none); absolute ones added to the embeddings would repeat in every segment (§3.3).
// LanguageModel::forward(ids, XLMemory&) and new_memory() (models/transformer.h) are defined in xl_memory.cpp.
//
// Cost per layer and segment of L positions: the keys and values of M + L positions instead of L (attention
// O(L·(M + L)·d), the K/V projections O((M + L)·d²)); memory B·M·d_model per layer, kept between segments.
#pragma once
#include <vector>

#include "engine/tensor.h"

namespace eng {

struct XLMemory {
  // Positions kept after each segment. new_memory() takes the config's mem_len; it may be set longer for
  // evaluation (the paper evaluates with a longer memory than it trains with, §4).
  int64_t mem_len = 0;
  std::vector<Tensor> layers;  // per layer [B, M, d_model], never requiring grad; empty before the first segment

  int64_t length() const { return layers.empty() ? 0 : layers.front().size(1); }  // M
  void reset() { layers.clear(); }
};

// The next memory of one layer: the last mem_len rows of [memory ∘ h] along positions (memory [B, M, d] may be
// undefined: M = 0), as a fresh tensor outside the graph. h [B, L, d].
Tensor xl_next_memory(const Tensor& memory, const Tensor& h, int64_t mem_len);

}  // namespace eng
