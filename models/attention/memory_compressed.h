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
//
// Recurrent form: the compressed slots K̃, Ṽ of the complete blocks plus the raw keys and values of the open block
// (at most c − 1 positions, in a buffer of c). Step t writes k_t, v_t into the open block; when it completes
// (t mod c = c − 1) its slot is convolved and appended, so the new query sees exactly the complete blocks, as in
// the parallel form. Cost per step: O(H·(t/c)·D) attention plus, once per block, O(H·c·D²) for its slot; memory
// O(H·(t/c)·D + G·c·D) for G K/V groups (the open block is kept per group, the slots per head: each head has its
// own W^K, W^V).
#pragma once
#include <memory>
#include <string>

#include "models/attention/attention.h"
#include "models/attention/softmax.h"

namespace eng {

// The recurrent form's state: slots.k, slots.v [B, H, capacity, D] hold slots.stored compressed blocks; open_k,
// open_v [B, G, c, D] the first `open` positions of the block being filled.
struct MemoryCompressedState : AttentionState {
  KVCacheState slots;
  Tensor open_k, open_v;
  int64_t open = 0;
  int64_t absorbed() const { return slots.stored * (open_k.defined() ? open_k.size(2) : 0) + open; }
};

class MemoryCompressedAttention : public Attention {
 public:
  explicit MemoryCompressedAttention(const AttentionConfig& config);
  std::string name() const override { return "memory-compressed"; }
  std::unique_ptr<AttentionState> new_state() const override;

  int64_t compress() const { return c_; }

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  Tensor compress_rows(const Tensor& x, const Tensor& w, const std::vector<int64_t>& lengths) const;

  int64_t c_, heads_, head_dim_;
  bool causal_;
  Tensor wk_, wv_;
};

}  // namespace eng
