// `dilated` attention, the atomic pattern of Lin et al. 2021 §4.1.1 (as used by Longformer, Beltagy et al. 2020
// §3.1): a band with gaps, query i attends key j when i - j is a multiple of `dilation` and |i - j| <= window *
// dilation, i.e. `window` keys on each side; causal: j <= i. dilation 1 is the band. Cost O(N (2 window + 1) D)
// for dilations below the block size; above it each key costs a block row.
#include <cstdlib>

#include "models/attention/sparse_atoms.h"
#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

class Dilated : public SparsePattern {
 public:
  Dilated(const PatternGeometry& g, int64_t window, int64_t dilation) : SparsePattern(g), w_(window), d_(dilation) {}
  bool allowed(int64_t, int64_t i, int64_t j) const override {
    const int64_t gap = i - j;
    return (!geometry().causal || gap >= 0) && std::abs(gap) <= w_ * d_ && gap % d_ == 0;
  }
  void key_blocks(int64_t, int64_t qb, std::vector<int64_t>& out) const override {
    if (d_ < geometry().block) {  // every block in reach holds keys
      append_range(qb, q_first(qb) - w_ * d_, q_last(qb) + w_ * d_, out);
      return;
    }
    for (int64_t m = -w_; m <= w_; ++m) append_range(qb, q_first(qb) + m * d_, q_last(qb) + m * d_, out);
  }

 private:
  int64_t w_, d_;
};

}  // namespace

PatternPtr dilated_pattern(const PatternGeometry& g, int64_t window, int64_t dilation) {
  return std::make_unique<Dilated>(g, window, dilation);
}

namespace {

std::unique_ptr<Attention> make_dilated(const AttentionConfig& c) {
  const int64_t w = c.options.get_int("window", 32, IntRange::at_least(0));
  const int64_t d = c.options.get_int("dilation", 2, IntRange::at_least(1));
  // Row t reads back to t - w d: the recurrent form keeps a ring of the last w d + 1 keys and values.
  return std::make_unique<SparseAttention>(
      "dilated", c, [w, d](const PatternGeometry& g) { return dilated_pattern(g, w, d); }, "", SparseStep{"", w * d});
}

}  // namespace

ENG_REGISTER_ATTENTION(dilated, "dilated", "dilated sliding-window sparse attention: every dilation-th key within window steps",
                       make_dilated);

}  // namespace eng
