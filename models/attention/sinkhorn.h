// Sparse Sinkhorn attention (Tay, Bahri, Yang, Metzler, Juan 2020, "Sparse Sinkhorn Attention", arXiv
// 2002.11296), the `sinkhorn` variant: a learned sorting network softly permutes blocks of keys and values, and
// every query block attends to its own block and to the block sorted into its place.
//
//   blocks     N positions in nb = ⌈N / c⌉ blocks of c = min(`block`, N); the last one padded internally with
//              hidden zero keys (§3: the sequence is split into blocks of size b)
//   sort net   X'_i = Σ_{t in block i} k_t (ψ_P, sum pooling of the block's keys, §3.1), R = X' W with W [H, D, nb_max]
//              per head, nb_max = ⌈max_len / block⌉, its first nb columns (the sorting network P(·) of §3.1, one
//              linear layer: exp already makes the matrix positive)
//   Sinkhorn   log space (§3.1, "Sinkhorn normalization"): X⁰ = R / τ; `iters` times a row then a column
//              normalisation, X ← X − logsumexp_row(X), X ← X − logsumexp_col(X) (S^k = F_c(F_r(S^{k−1}))); P = exp(X)
//   attend     sorted blocks ψ_S(K)_i = Σ_j P_ij K_j, ψ_S(V)_i likewise; query block i takes one softmax over the
//              2c keys [K_i ; ψ_S(K)_i] with logits q·k / √D (§3.2: sorted attention combined with local attention)
//   SortCut    `sortcut` = n > 0 (the paper's SortCut truncation): every query attends to the n·c keys of the first n sorted blocks only
//   causal     (§3.3, Causal Sinkhorn Balancing, made exactly leak-free here): X'_i = Σ of the keys of blocks < i
//              (a shifted cumulative sum); R_ij is masked for j ≥ i, so block i draws only from earlier blocks
//              (block 0 from none); the column normalisation of row i runs over rows ≤ i only
//              (X_ij ← X_ij − logsumexp_{j < i' ≤ i} X_i'j), so row i of P depends on blocks < i alone; the own
//              block is causally masked. No Gumbel noise (the output is a deterministic function of q, k, v, W).
//
// Masks: key padding zeroes the padded keys and values before they are summed, sorted or mixed; a sorted key
// slot t is hidden when slot t is padding in every block the row may draw from. Keep, bias and ALiBi are refused.
//
// Cost per head: O(N·D·nb) for the summaries, R and the sorted blocks, O(nb²·iters) for Sinkhorn (causal too:
// a running log-sum-exp down the columns), O(N·c·(D + Dv)) for the attention (O(N·n·c·(D + Dv)) with SortCut);
// memory O(N·c + nb²) beside the inputs, never N × N.
//
// Options: block (default 64), iters (default 5), temperature = τ > 0 (default 0.75), sortcut = n (default 0, off;
// non-causal only). Needs AttentionConfig::max_len >= 1 (W has a column per block) and N <= max_len. The sorting
// network is the parameter "sort_net" [H, D, nb_max], drawn N(0, 1/D) from AttentionConfig::seed. Self-attention
// only (Lq == Lk).
//
// Recurrent form (models/attention/sinkhorn_step.cpp; built causal, without SortCut): row t of the causal form
// depends on positions <= t only, whatever the length (row i of P reads the blocks < i, and for N < block the one
// block of N positions is causal softmax, as block 0 is), so step t equals row t of the parallel form of any length
// > t. The state keeps every key and value (the sorted block of block i mixes all blocks < i), the summary of the
// complete blocks, per iteration the running column log-sum-exp of the rows so far, and the current block's sorted
// keys and values; at the first position of block i it computes row i of R and of P (O(i·(D + iters))) and the
// sorted block (O(i·c·(D + Dv))), then every step attends over at most 2c keys (O(c·(D + Dv))). K/V may have G
// heads dividing q's H (grouped-query attention).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "models/attention/attention.h"
#include "models/attention/row_cache.h"

namespace eng {

// The recurrent state of causal Sinkhorn attention.
struct SinkhornState : AttentionState {
  RowCache k, v;              // every position: [B, G, ·, D], [B, G, ·, Dv]
  Tensor summary;             // [B, G, D] f64: X'_i, the sum of the keys of the blocks before the current one
  Tensor lse;                 // [B, H, iters, nb_max] f64: per iteration, log Σ exp down each column of the rows so far
  Tensor sorted_k, sorted_v;  // [B, H, c, D], [B, H, c, Dv] f64: ψ_S(K)_i and ψ_S(V)_i of the current block i
};

class SinkhornAttention : public Attention {
 public:
  explicit SinkhornAttention(const AttentionConfig& config);
  std::string name() const override { return "sinkhorn"; }

  // P [B, H, nb, nb] for keys k [B, H, N, D] (differentiable in k and the sorting network), as forward uses it;
  // mask supplies key_lengths and causal.
  Tensor sorting_matrix(const Tensor& k, const AttentionMask& mask = {}) const;

  int64_t block(int64_t n) const { return n < block_ ? n : block_; }  // c used for a sequence of n positions
  int64_t iters() const { return iters_; }
  double temperature() const { return temperature_; }
  int64_t sortcut() const { return sortcut_; }
  const Tensor& sort_net() const { return w_; }  // [H, D, nb_max]
  // Null unless built causal without SortCut.
  std::unique_ptr<AttentionState> new_state() const override;

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  // k [B, H, N, D] with padded keys zeroed and internal padding appended: [B, H, nb·c, D].
  Tensor padded(const Tensor& x, const AttentionMask& mask) const;
  Tensor sinkhorn(const Tensor& keys, int64_t c, bool causal) const;  // keys as padded() gives them
  void sort_block(SinkhornState& s, int64_t H, int64_t blk) const;     // the step's sorted block blk >= 1

  int64_t heads_, head_dim_, max_len_, block_, iters_, sortcut_;
  double temperature_;
  bool causal_;  // built causal (AttentionConfig::causal): the recurrent form exists
  Tensor w_;
};

}  // namespace eng
