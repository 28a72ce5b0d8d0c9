// Reformer LSH attention (Kitaev et al. 2020, "Reformer: The Efficient Transformer", arXiv 2001.04451), the
// `reformer` variant: shared-QK attention restricted to the neighbours a locality-sensitive hash finds.
//
//   keys     k_j = q_j / ‖q_j‖ (shared QK, Sec. 2); k of the interface is ignored, logits q_i·k_j / √D
//   hash     h(x) = argmax([xR; −xR]) with R ∈ R^{D × nb/2} Gaussian (Sec. 2, "random rotations"), one R per round
//   sort     positions stably by (bucket, position); chunks of `chunk` consecutive sorted positions; every chunk
//            attends to itself and to the previous chunk, the first chunk to the last (Eq. 5, trax's look-one-back)
//   masks    a token's own logit is replaced by −1e5, so it attends to itself only when nothing else is visible
//            (Sec. 2.1 "Causal masking for shared-QK attention"); causal and key padding by ORIGINAL positions
//   rounds   o_i = Σ_r exp(z(i, P_i^(r)) − z(i, P_i)) o_i^(r) (Eq. 7–8), z the log-sum-exp of each round's logits;
//            with dedup, log N_ij is subtracted from the logit of a key j that i sees in N_ij rounds (Eq. 9–10)
//
// Cost per head and round: O(N·D·nb/2) to hash, O(N log N) to sort, O(N·chunk·(D + Dv)) time for the chunks and
// O(N·(D + Dv)) memory: the chunks run as one fused op (ops/lsh_attention.h) that makes their logits in a per-thread
// scratch and recomputes them in the backward, so neither the [N/chunk, chunk, 2·chunk] logits nor N × N are kept.
//
// Options: buckets = nb (even, default 32), rounds (default 1), chunk (default 64), dedup (default false),
// redraw = every-call | fixed (default every-call). The rotations of a call are a pure function of (config.seed,
// draw), with draw = the call index (every-call) or 0 (fixed); call() is kept in the buffer "hash_calls" and
// advances once per training forward, so set_call() replays a call's buckets exactly (a reversible backward).
// Self-attention only (Lq == Lk); keep, bias and ALiBi are refused. No recurrent form (new_state() is null).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/attention/attention.h"

namespace eng {

class ReformerAttention : public Attention {
 public:
  explicit ReformerAttention(const AttentionConfig& config);
  std::string name() const override { return "reformer"; }

  // The call index the next forward hashes with; a training forward then advances it by one.
  int64_t call() const { return calls_.data<int64_t>()[0]; }
  void set_call(int64_t call);
  // R of every round for call `call`: [rounds, head_dim, buckets / 2], f64.
  Tensor rotations(int64_t call, int64_t head_dim) const;
  // Bucket ids of q [B, H, N, D] under the rotations of call `call` (default: call()): [rounds, B, H, N], i64.
  Tensor buckets(const Tensor& q, int64_t call) const;
  Tensor buckets(const Tensor& q) const { return buckets(q, call()); }

  int64_t num_buckets() const { return nb_; }
  int64_t rounds() const { return rounds_; }
  int64_t chunk() const { return chunk_; }
  bool dedup() const { return dedup_; }

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;

 private:
  std::vector<int64_t> hash(const Tensor& q, int64_t call) const;  // [rounds, B, H, N] row-major

  int64_t nb_, rounds_, chunk_;
  bool dedup_;
  bool fixed_;      // redraw=fixed: every call uses draw 0
  uint64_t seed_;
  Tensor calls_;    // [1] i64 buffer "hash_calls": the next call index
};

}  // namespace eng
