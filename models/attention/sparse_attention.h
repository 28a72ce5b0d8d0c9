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
#pragma once
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "models/attention/attention.h"
#include "models/attention/sparse_pattern.h"
#include "ops/block_sparse_layout.h"

namespace eng {

class SparseAttention : public Attention {
 public:
  // `no_causal`: empty when the pattern has a causal form, else why it has none (said when refusing).
  SparseAttention(std::string name, const AttentionConfig& config, PatternBuilder builder, std::string no_causal = "");
  std::string name() const override { return name_; }
  // The layout the kernel runs for `heads` heads, Lq queries from position query_offset and Lk keys.
  std::shared_ptr<const BlockSparseLayout> layout(int64_t heads, int64_t Lq, int64_t Lk, int64_t query_offset,
                                                  bool causal);

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;

 private:
  std::string name_, no_causal_;
  PatternBuilder builder_;
  int64_t block_ = 64;
  double scale_ = 0;  // 0: 1/sqrt(D)
  bool causal_ = false;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>, std::shared_ptr<const BlockSparseLayout>> cache_;
};

// The `block` option (what SparseAttention will use), for patterns whose defaults follow it.
int64_t sparse_block(const AttentionConfig& c);

}  // namespace eng
