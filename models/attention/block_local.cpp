// `block-local` attention, the atomic pattern of Lin et al. 2021 §4.1.1 (Image Transformer's 1D local attention,
// Parmar et al. 2018, with the memory block equal to the query block): the sequence is cut into non-overlapping
// blocks of `block` positions and a query attends the keys of its own block; causal: j <= i. Cost O(N block D).
#include "models/attention/sparse_atoms.h"
#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

class BlockLocal : public SparsePattern {
 public:
  using SparsePattern::SparsePattern;
  bool allowed(int64_t, int64_t i, int64_t j) const override {
    return i / geometry().block == j / geometry().block && (!geometry().causal || j <= i);
  }
  void key_blocks(int64_t, int64_t qb, std::vector<int64_t>& out) const override { out.push_back(qb); }
};

}  // namespace

PatternPtr block_local_pattern(const PatternGeometry& g) { return std::make_unique<BlockLocal>(g); }

namespace {

std::unique_ptr<Attention> make_block_local(const AttentionConfig& c) {
  // Row t reads its own block, at most block - 1 positions back: the recurrent form keeps a ring of `block`.
  return std::make_unique<SparseAttention>("block-local", c, block_local_pattern, "",
                                           SparseStep{"", sparse_block(c) - 1});
}

}  // namespace

ENG_REGISTER_ATTENTION(block_local, "block-local", "block-local sparse attention: queries see the keys of their own block",
                       make_block_local);

}  // namespace eng
