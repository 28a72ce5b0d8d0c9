// `band` (sliding window) attention, the atomic pattern of Lin et al. 2021 §4.1.1: query i attends key j when
// |i - j| <= window; causal: i - window <= j <= i. Cost O(N (2 window + 1) D).
#include <cstdlib>

#include "models/attention/sparse_atoms.h"
#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

class Band : public SparsePattern {
 public:
  Band(const PatternGeometry& g, int64_t window) : SparsePattern(g), w_(window) {}
  bool allowed(int64_t, int64_t i, int64_t j) const override {
    return geometry().causal ? j <= i && i - j <= w_ : std::abs(i - j) <= w_;
  }
  void key_blocks(int64_t, int64_t qb, std::vector<int64_t>& out) const override {
    append_range(qb, q_first(qb) - w_, q_last(qb) + w_, out);
  }

 private:
  int64_t w_;
};

}  // namespace

PatternPtr band_pattern(const PatternGeometry& g, int64_t window) { return std::make_unique<Band>(g, window); }

namespace {

std::unique_ptr<Attention> make_band(const AttentionConfig& c) {
  const int64_t w = c.options.get_int("window", 64, IntRange::at_least(0));
  // Row t reads t - w .. t: the recurrent form keeps a ring of the last w + 1 keys and values.
  return std::make_unique<SparseAttention>(
      "band", c, [w](const PatternGeometry& g) { return band_pattern(g, w); }, "", SparseStep{"", w});
}

}  // namespace

ENG_REGISTER_ATTENTION(band, "band", "band (sliding window) sparse attention, |i - j| <= window (Lin et al. 2021 §4.1)",
                       make_band);

}  // namespace eng
