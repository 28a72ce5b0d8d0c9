// `star` attention (Star-Transformer, Guo et al. 2019; Lin et al. 2021 §4.1.1): a band of width 3 (each token
// sees itself and its two neighbours) plus one relay node at position 0, which attends to every position and
// which every position attends to, so any two tokens are at most two hops apart. The relay node is the caller's
// first position (the paper's relay is an extra node, initialised to the mean of the tokens). No causal form:
// the relay gathers the whole sequence. Cost O(4 N D) plus O(N D) for the relay row.
#include "models/attention/sparse_atoms.h"
#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

std::unique_ptr<Attention> make_star(const AttentionConfig& c) {
  auto pattern = [](const PatternGeometry& g) {
    std::vector<PatternPtr> parts;
    parts.push_back(band_pattern(g, 1));
    parts.push_back(global_pattern(g, 1));
    return union_of(g, std::move(parts));
  };
  return std::make_unique<SparseAttention>("star", c, pattern, "the relay node gathers the whole sequence");
}

}  // namespace

ENG_REGISTER_ATTENTION(star, "star", "Star-Transformer sparse attention: band of width 3 plus one relay node (position 0)",
                       make_star);

}  // namespace eng
