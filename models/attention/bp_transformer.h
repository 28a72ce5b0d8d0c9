// The sequence layout of the `bp-transformer` variant (models/attention/bp_transformer.cpp): T tokens followed by
// the span nodes of the binary partition over them, level by level. Level 0 is the tokens; level l >= 1 has
// ceil(T / 2^l) nodes, node m spanning tokens [m 2^l, (m + 1) 2^l), up to the level of a single node.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "models/attention/sparse_attention.h"

namespace eng {

struct BinaryPartition {
  int64_t tokens = 0;
  std::vector<int64_t> start, count;  // per level: the position of its first node and its number of nodes
  int64_t levels() const { return int64_t(count.size()); }
  int64_t length() const { return start.back() + count.back(); }  // tokens plus span nodes
  explicit BinaryPartition(int64_t tokens);
};

// The partition whose layout is exactly n positions; throws (naming `variant` and the nearest lengths) when
// no number of tokens gives n.
BinaryPartition partition_of_length(int64_t n, const char* variant);

// `bp-transformer` with nodes=pooled (models/attention/bp_pooled.cpp): T tokens in, T rows out; the span nodes are
// built inside the attention from the tokens' keys and values, then `tree` (the pattern over the tokens-then-nodes
// layout, k = `window`) is laid over them. Has a recurrent form when built causal.
std::unique_ptr<Attention> make_bp_pooled(const AttentionConfig& c, int64_t window, PatternBuilder tree);

}  // namespace eng
