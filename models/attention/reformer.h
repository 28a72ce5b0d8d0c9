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
// Self-attention only (Lq == Lk); keep, bias and ALiBi are refused.
//
// Recurrent form (built causal): row t of the causal form depends on LATER positions too (their buckets take sorted
// slots before or after t and move t's chunk, and N sets c = min(chunk, N) and the chunk count), so no step can equal
// the parallel form of a longer sequence. step() at position t gives row t of the causal parallel form of the prefix
// 0 … t, exactly: the state keeps every position's key (its normalised query), value, and per round its bucket and
// its rank among the earlier positions of that bucket (a position's bucket never changes: it depends only on its
// query and the rotations of call(), which step() never advances); the prefix's sorted slot of position j is then
// (positions in lower buckets) + rank_j, so t's chunk and the previous one are found by one pass over the prefix.
// Cost per step: O(R·D·nb/2) to hash, O(R·(t + nb)) integer work to place the prefix, O(R·c·(D + Dv)) for the
// attention (O(R²·c) more with dedup); memory per position: H·D keys, G·Dv values, 2·R·H bucket ids and ranks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/attention/attention.h"
#include "models/attention/row_cache.h"

namespace eng {

// The recurrent state of causal Reformer attention.
struct ReformerState : AttentionState {
  RowCache keys;    // [B, H, ·, D]: k_j = q_j / ‖q_j‖ (shared QK)
  RowCache values;  // [B, G, ·, Dv]
  RowCache placed;  // [B, H, ·, 2R] i64: per round, the bucket of position j and its rank within that bucket
  Tensor counts;    // [B, H, R, nb] i64: positions per bucket so far
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
