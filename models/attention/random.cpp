// `random` attention, the atomic pattern of Lin et al. 2021 §4.1.1 (as in BigBird, Zaheer et al. 2020, whose
// random attention is per block): for each head h and query block b, `random_blocks` distinct key blocks are drawn
// uniformly from all key blocks (causal: from blocks 0 .. b), and the queries of block b attend every key of the
// drawn blocks (causal: with j <= i). The draw is Floyd's sampling over the Philox stream of key `seed` starting
// at word (h << 40) + (b << 16), so any block's draw is computed on its own and never depends on the thread
// count. Cost O(N random_blocks block D).
#include <algorithm>

#include "engine/error.h"
#include "engine/rng.h"
#include "models/attention/sparse_atoms.h"
#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

class Random : public SparsePattern {
 public:
  Random(const PatternGeometry& g, int64_t count, uint64_t seed) : SparsePattern(g) {
    const int64_t nb = g.blocks();
    drawn_.resize(size_t(g.heads * nb));
    for (int64_t h = 0; h < g.heads; ++h)
      for (int64_t b = 0; b < nb; ++b) drawn_[size_t(h * nb + b)] = draw(count, seed, h, b, g.causal ? b + 1 : nb);
  }
  int64_t heads() const override { return geometry().heads; }
  bool allowed(int64_t h, int64_t i, int64_t j) const override {
    const auto& d = drawn(h, i / geometry().block);
    return (!geometry().causal || j <= i) && std::binary_search(d.begin(), d.end(), j / geometry().block);
  }
  void key_blocks(int64_t h, int64_t qb, std::vector<int64_t>& out) const override {
    const auto& d = drawn(h, qb);
    out.insert(out.end(), d.begin(), d.end());
  }

 private:
  // `count` distinct blocks of [0, m) (all of them when count >= m), sorted.
  static std::vector<int64_t> draw(int64_t count, uint64_t seed, int64_t h, int64_t b, int64_t m) {
    Rng rng(seed, (uint64_t(h) << 40) + (uint64_t(b) << 16));
    std::vector<int64_t> picked;
    for (int64_t t = std::max<int64_t>(m - count, 0); t < m; ++t) {
      const int64_t x = int64_t(rng.below(uint64_t(t + 1)));
      picked.push_back(std::find(picked.begin(), picked.end(), x) == picked.end() ? x : t);
    }
    std::sort(picked.begin(), picked.end());
    return picked;
  }
  const std::vector<int64_t>& drawn(int64_t h, int64_t b) const { return drawn_[size_t(h * geometry().blocks() + b)]; }
  std::vector<std::vector<int64_t>> drawn_;
};

}  // namespace

PatternPtr random_pattern(const PatternGeometry& g, int64_t count, uint64_t seed) {
  return std::make_unique<Random>(g, count, seed);
}

namespace {

std::unique_ptr<Attention> make_random(const AttentionConfig& c) {
  const int64_t r = c.options.get_int("random_blocks", 3, IntRange{0, 65536});
  const uint64_t seed = c.options.get_seed("seed", c.seed);  // the layer's seed may use all 64 bits
  return std::make_unique<SparseAttention>("random", c,
                                           [r, seed](const PatternGeometry& g) { return random_pattern(g, r, seed); });
}

}  // namespace

ENG_REGISTER_ATTENTION(random, "random",
                       "random sparse attention: each query block sees random_blocks seeded random key blocks",
                       make_random);

}  // namespace eng
