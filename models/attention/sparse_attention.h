// The Attention of every position-based sparse variant: a pattern (models/attention/sparse_pattern.h) laid over
// the input's length, turned into a BlockSparseLayout and run by the block-sparse kernel
// (ops/attention_block_sparse.h). Each variant file only supplies its pattern.
//
// Options shared by every sparse variant: block (the kernel's block size, also the unit of the block-based
// patterns: random, block-local; default 64), scale (the logit scale, default 1/sqrt(D)).
//
// Causal: a causal model (AttentionConfig::causal) or a causal mask lays the pattern's causal form; the pattern's
// rule includes causality, so the kernel gets no causal flag of its own. Variants without a causal form refuse
// both. Queries are positions query_offset .. query_offset + Lq - 1 of the key sequence (Lq + query_offset <= Lk),
// causal or not. Key padding (key_lengths) and ALiBi pass to the kernel; dense keep/bias masks are refused.
//
// Layouts are cached per (heads, Lq, Lk, query_offset, causal): building one evaluates the rule on every listed
// block, O(N w) calls, so a training loop builds it once.
//
// Recurrent form (models/attention/sparse_step.cpp), for a variant built causal whose pattern has a causal form:
// step t is row t of the causal pattern, a softmax over the keys j <= t that allowed(h, t, j) admits (with the
// scale and ALiBi of the parallel form). The keys are found through key_blocks of t's block, so a step costs
// O((w + block) D) per head for a pattern row of w keys, not O(t). The pattern is laid over a length that doubles
// as generation passes it: row t must not depend on the total length, which each variant vouches for (SparseStep).
// k and v may have G heads dividing q's H (grouped-query attention): the state keeps G heads.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "models/attention/attention.h"
#include "models/attention/sparse_pattern.h"
#include "ops/block_sparse_layout.h"

namespace eng {

// What the recurrent form may assume of a variant's causal pattern.
struct SparseStep {
  std::string none;    // non-empty: no recurrent form, and why (say, row t depends on the sequence length)
  int64_t reach = -1;  // >= 0: apart from the kept positions, no row t reads a key before t - reach, so the recent
                       // positions live in a ring of reach + 1
  // With a ring, the older positions later rows still read (global prefix, summary columns): kept(j) is j's index
  // among them, ascending from 0, or -1 when no row beyond j + reach reads j. Null: none.
  std::function<int64_t(int64_t)> kept = nullptr;
};

// The state of the recurrent form: keys [B, G, slots, D] and values [B, G, slots, Dv]. Position j lives in slot
// j (a cache that doubles when full, like softmax's KVCacheState) or, for a pattern of bounded reach, in slot
// j mod ring while it is among the last `ring` positions and in slot ring + kept(j) for good when the variant keeps
// it: a ring whose size is fixed whatever the length, then the kept positions (their part doubles when full).
struct SparseKVState : AttentionState {
  Tensor k, v;
  int64_t ring = 0;    // 0: the growing cache; else the ring's slots
  int64_t stored = 0;  // positions written
  PatternPtr pattern;  // the causal pattern laid over pattern->geometry().n > every step so far
  int64_t slots() const { return k.defined() ? k.size(2) : 0; }
};

class SparseAttention : public Attention {
 public:
  // `no_causal`: empty when the pattern has a causal form, else why it has none (said when refusing).
  SparseAttention(std::string name, const AttentionConfig& config, PatternBuilder builder, std::string no_causal = "",
                  SparseStep step = {});
  std::string name() const override { return name_; }
  // Null unless the variant was built causal, its pattern has a causal form and SparseStep allows a step.
  std::unique_ptr<AttentionState> new_state() const override;
  // The layout the kernel runs for `heads` heads, Lq queries from position query_offset and Lk keys.
  std::shared_ptr<const BlockSparseLayout> layout(int64_t heads, int64_t Lq, int64_t Lk, int64_t query_offset,
                                                  bool causal);

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;
  double scale_for(int64_t head_dim) const;  // the `scale` option, else 1/sqrt(D)

 private:
  std::string name_, no_causal_;
  PatternBuilder builder_;
  int64_t block_ = 64;
  double scale_ = 0;  // 0: 1/sqrt(D)
  bool causal_ = false;
  SparseStep step_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>, std::shared_ptr<const BlockSparseLayout>> cache_;
};

// The `block` option (what SparseAttention will use), for patterns whose defaults follow it.
int64_t sparse_block(const AttentionConfig& c);

}  // namespace eng
