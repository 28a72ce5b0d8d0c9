// Memory-compressed attention (Liu et al. 2018, "Generating Wikipedia by Summarizing Long Sequences",
// arXiv 1801.10198, §4.2.4), the `memory-compressed` variant: keys and values are shortened by a strided
// convolution with kernel size = stride = c before softmax attention, so the logits are N × N/c:
//
//   K̃_b = Σ_{r<c} K_{bc+r} W^K_{h,r},  Ṽ_b = Σ_{r<c} V_{bc+r} W^V_{h,r}     (b = 0 .. ⌈N/c⌉ − 1)
//   out = softmax(Q K̃ᵀ / √D) Ṽ
//
// W^K, W^V are learned per head: [H, c·D, D] and [H, c·Dv, Dv] ("wk", "wv"), initialised to the mean over the
// c positions (1/c times stacked identities), so an untrained layer attends over average-pooled blocks.
// The sequence is padded with zero keys and values to a multiple of c.
//
// Cost per head: O(N·(N/c)·D) time; O(N·D) extra memory (the flash kernel never forms the N × N/c logits).
//
// Masks: key padding zeroes the padded keys and values before the convolution, and a compressed slot is padding
// when its whole block is (slots b < ⌈length/c⌉ stay). Causal: query i sees slot b only when the whole block is
// in its past (bc + c − 1 <= i), so a slot never leaks a future position; queries i < c − 1 see no slot and output
// zeros — the paper interleaves these layers with local attention, which covers them. Keep, bias and ALiBi are
// refused (they index keys that no longer exist). Option: compress = c (default 3, the paper's).
// No recurrent form.
#pragma once
#include <string>

#include "models/attention/attention.h"

namespace eng {

class MemoryCompressedAttention : public Attention {
 public:
  explicit MemoryCompressedAttention(const AttentionConfig& config);
  std::string name() const override { return "memory-compressed"; }

  int64_t compress() const { return c_; }

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;

 private:
  Tensor compress_rows(const Tensor& x, const Tensor& w, const std::vector<int64_t>& lengths) const;

  int64_t c_, heads_, head_dim_;
  bool causal_;
  Tensor wk_, wv_;
};

}  // namespace eng
