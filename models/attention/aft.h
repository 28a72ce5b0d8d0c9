// The Attention Free Transformer family (Zhai et al. 2021, "An Attention Free Transformer", arXiv 2105.14103):
//
//   Y_t = σ(Q_t) ⊙ Σ_{t'} exp(K_{t'} + w_{t,t'}) ⊙ V_{t'} / Σ_{t'} exp(K_{t'} + w_{t,t'})            (Eq. 2)
//
// applied per head, elementwise over the D features of q, k, v [B, H, T, D] (the multi-head layer did the
// projections; v must have q's head dim), with an additive position bias w that each variant defines:
//
//   aft-simple   w = 0: O(T·D) time and memory per head; cross-attention (Lq != Lk) when not causal;
//                recurrent form step() with a running (max, numerator, denominator) per (b, h, d)
//   aft-full     w ∈ R^{max_len×max_len} shared by the heads, or w = u vᵀ with u, v ∈ R^{max_len×r} (factor=r,
//                the paper's factorised form); O(T²·D) time as two GEMMs, O(T² + T·D) memory
//   aft-local    w learned within |t − t'| < s (window=s), zero outside; O(T·s·D) time, O(T·D) memory
//   aft-conv     w_{t,t'} = w_h[t' − t] a per-head kernel of s taps (window=s), shared by all positions;
//                O(T·s·D) time, O(T·D) memory; no max_len needed
//
// Causal (AttentionConfig::causal or mask.causal, as sparse_attention.cpp combines them): sums over t' <= t only.
// Key padding (key_lengths) excludes padded keys exactly. keep, bias and ALiBi are refused: AFT has no (query,
// key) logits for them to act on (its position term is w). Files: aft.cpp (the shared checks and aft-simple),
// aft_full.cpp, aft_local.cpp, aft_conv.cpp; the kernel of simple, local and conv is ops/aft.h.
//
// Recurrent forms (step(), equal to the causal parallel form's row): aft-simple, the running sums; aft-local and
// aft-conv, the running sums plus a ring of the last s positions for the band (aft_band_step.cpp): O(s·D) per token
// and constant memory; aft-full, a cache of every position (w_{t,t'} is learned per pair, see aft_full.cpp). K/V
// may come in G groups (grouped-query): the sums and caches depend on k and v only, so they are kept per group.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/attention/attention.h"
#include "models/attention/softmax.h"

namespace eng {

class AftAttention : public Attention {
 public:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;

 protected:
  // indexed: w is indexed by position, so only self-attention (Lq == Lk from position 0) makes sense.
  AftAttention(const AttentionConfig& config, bool indexed);
  // The weighted average of Eq. 2 without σ(Q): k, v [B, H, T, D] -> [B, H, Lq, D].
  virtual Tensor mix(const Tensor& k, const Tensor& v, int64_t Lq, bool causal, const AttentionMask& mask) = 0;
  // Refuses T > max_len for the variants whose w is sized by it.
  void check_max_len(int64_t T) const;
  // aft-local's and aft-conv's step: absorbs k, v [B, G, 1, D] into `state` (an AftBandState) and returns row
  // state.length of the causal form for q [B, H, 1, D], whose band offsets −(s − 1) .. 0 carry w[(per_head ? h : 0)
  // · s + off + s − 1] (this row's w).
  Tensor band_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state, int64_t s,
                   const std::vector<double>& w, bool per_head) const;
  int64_t heads_, max_len_;

 private:
  bool causal_, indexed_;
};

struct AftSimpleState : AttentionState {
  std::vector<double> m, num, den;  // [B, H, D] each: running max and the sums relative to e^max
  Shape shape;                      // [B, H, 1, D] of the first step
  int64_t absorbed = 0;             // positions absorbed so far
};

// aft-local's and aft-conv's recurrent state, per batch element, K/V group and feature: the unbiased running sums
// (as AftSimpleState) and a ring of the last s positions (slot t mod s) holding v, e^{K − m} and the running maximum
// m after that position, the band's terms in the parallel form's arithmetic. f64 tensors (counted by the allocator,
// as bench generate reports), O(B·G·s·D) whatever the length.
struct AftBandState : AttentionState {
  int64_t absorbed = 0;                  // positions absorbed so far
  Tensor m, num, den;                    // [B, G, 1, D]
  Tensor ring_v, ring_e, ring_m;         // [B, G, s, D]
};

// aft-full's recurrent state: e^{K − K_0} and e^{K − K_0} ⊙ V of every position so far, as the keys and values of a
// KV cache (softmax.h; f64 [B, G, capacity, D]), relative to the first key K_0 [B, G, 1, D] as the causal parallel
// form is.
struct AftFullState : AttentionState {
  int64_t absorbed = 0;
  Tensor k0;
  KVCacheState cache;
};

class AftSimple : public AftAttention {
 public:
  explicit AftSimple(const AttentionConfig& config);
  std::string name() const override { return "aft-simple"; }
  std::unique_ptr<AttentionState> new_state() const override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 protected:
  Tensor mix(const Tensor& k, const Tensor& v, int64_t Lq, bool causal, const AttentionMask& mask) override;
};

class AftFull : public AftAttention {
 public:
  explicit AftFull(const AttentionConfig& config);
  std::string name() const override { return "aft-full"; }
  int64_t factor() const { return factor_; }
  std::unique_ptr<AttentionState> new_state() const override;

 protected:
  Tensor mix(const Tensor& k, const Tensor& v, int64_t Lq, bool causal, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  int64_t factor_;  // 0: w itself; r > 0: w = u vᵀ
  Tensor w_, u_, v_;
};

class AftLocal : public AftAttention {
 public:
  explicit AftLocal(const AttentionConfig& config);
  std::string name() const override { return "aft-local"; }
  int64_t window() const { return s_; }
  std::unique_ptr<AttentionState> new_state() const override;

 protected:
  Tensor mix(const Tensor& k, const Tensor& v, int64_t Lq, bool causal, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  int64_t s_;
  Tensor band_;  // [max_len, 2s − 1]: band_[t, t' − t + s − 1] = w_{t,t'}
};

class AftConv : public AftAttention {
 public:
  explicit AftConv(const AttentionConfig& config);
  std::string name() const override { return "aft-conv"; }
  int64_t window() const { return s_; }
  // The offsets t' − t the kernel covers: causal [−(s − 1), 0]; else [−⌊s/2⌋, s − 1 − ⌊s/2⌋] (centred).
  std::pair<int64_t, int64_t> offsets(bool causal) const;
  std::unique_ptr<AttentionState> new_state() const override;

 protected:
  Tensor mix(const Tensor& k, const Tensor& v, int64_t Lq, bool causal, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  int64_t s_;
  Tensor kernel_;  // [H, s]: kernel_[h, t' − t − lo] = w_{h, t'−t}
};

}  // namespace eng
