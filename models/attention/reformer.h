// Reformer LSH attention (Kitaev et al. 2020, "Reformer: The Efficient Transformer", arXiv 2001.04451), the
// `reformer` variant: shared-QK attention restricted to the neighbours a locality-sensitive hash finds.
//
//   keys     k_j = q_j / ‖q_j‖ (shared QK, Sec. 2); k of the interface is ignored, logits q_i·k_j / √D
//   hash     h(x) = argmax([xR; −xR]) with R ∈ R^{D × nb/2} Gaussian (Sec. 2, "random rotations"), one R per round
//   sort     positions stably by (bucket, position); chunks of `chunk` consecutive sorted positions; every chunk
//            attends to itself and to the previous chunk, the first chunk to the last (Eq. 5, trax's look-one-back)
//   causal   (mask.causal) query i sees, per round, the w = 2·chunk most recent positions j <= i of its own bucket
//            (itself included): Eq. 4's P_i = {j : h(q_i) = h(k_j)} with j <= i, cut to a window of as many keys as
//            the own and the previous chunk hold. Row i then depends on positions <= i only: a bucket is a function
//            of one query, and j's place in i's window counts only positions between them. (The sorted chunks are
//            not causal: a later position's bucket takes a sorted slot and moves an earlier query's chunk.)
//   masks    a token's own logit is replaced by −1e5, so it attends to itself only when nothing else is visible
//            (Sec. 2.1 "Causal masking for shared-QK attention"); causal and key padding by ORIGINAL positions
//   rounds   o_i = Σ_r exp(z(i, P_i^(r)) − z(i, P_i)) o_i^(r) (Eq. 7–8), z the log-sum-exp of each round's logits;
//            with dedup, log N_ij is subtracted from the logit of a key j that i sees in N_ij rounds (Eq. 9–10)
//
// Cost per head and round: O(N·D·nb/2) to hash, O(N log N) to sort, O(N·chunk·(D + Dv)) time for the chunks and
// O(N·(D + Dv)) memory: the chunks run as one fused op (ops/lsh_attention.h) that makes their logits in a per-thread
// scratch and recomputes them in the backward, so neither the [N/chunk, chunk, 2·chunk] logits nor N × N are kept.
// Causal: the same op in window mode, chunks of w: O(N·2w·(D + Dv)) time (half of the logits fall outside the
// windows and are masked), the same memory.
// Options: buckets = nb (even, default 32), rounds (default 1), chunk (default 64), dedup (default false),
// redraw = every-call | fixed (default every-call). The rotations of a call are a pure function of (config.seed,
// draw), with draw = the call index (every-call) or 0 (fixed); call() is kept in the buffer "hash_calls" and
// advances once per training forward, so set_call() replays a call's buckets exactly (a reversible backward).
// Self-attention only (Lq == Lk); keep, bias and ALiBi are refused.
//
// Recurrent form (built causal): step() equals the causal parallel form's row t. The hashes are fixed during
// generation (call() is never advanced by step()). The state is, per round and bucket, a ring of the bucket's w most
// recent positions (key k_j = q_j/‖q_j‖, value, position): t enters the ring of its bucket and attends to it. It is
// bounded: R·nb·w slots per head at most, whatever the length (fewer while no bucket has w positions). Cost per step and head: O(R·D·nb/2) to hash, O(R·w·(D + Dv))
// to attend, O(R²·w²) more with dedup (N_tj by looking j up in t's ring of every round).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/attention/attention.h"

namespace eng {

// The recurrent state of causal Reformer attention: per (batch, head) R·nb rings (round r, bucket b at r·nb + b) of
// `cap` slots; cap doubles (from 8) when a ring fills, up to w; the n-th position of a bucket (n from 0) sits in slot
// n mod cap (no ring wraps before cap = w).
struct ReformerState : AttentionState {
  Tensor keys;       // [B, H, R·nb, cap, D]: k_j = q_j / ‖q_j‖ (shared QK)
  Tensor values;     // [B, H, R·nb, cap, Dv]: v_j of j's K/V group
  Tensor positions;  // [B, H, R·nb, cap] i64: j, or −1 for a slot not filled yet
  Tensor counts;     // [B, H, R, nb] i64: positions per bucket so far
  int64_t stored = 0;
};

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
  int64_t window() const { return 2 * chunk_; }  // w: the keys per round of a causal query (and its step)
  bool dedup() const { return dedup_; }
  // Null unless built causal.
  std::unique_ptr<AttentionState> new_state() const override;

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  std::vector<int64_t> hash(const Tensor& q, int64_t call) const;  // [rounds, B, H, N] row-major

  int64_t nb_, rounds_, chunk_;
  bool dedup_;
  bool fixed_;      // redraw=fixed: every call uses draw 0
  bool causal_;     // built causal (AttentionConfig::causal): the recurrent form exists
  uint64_t seed_;
  Tensor calls_;    // [1] i64 buffer "hash_calls": the next call index
};

}  // namespace eng
