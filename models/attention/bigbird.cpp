// `bigbird` attention (BigBird, Zaheer et al. 2020, §2; Lin et al. 2021 §4.1.1): a sliding window of `window`
// keys on each side, global attention on the first `globals` positions (BigBird-ITC's internal global tokens),
// and per head and query block `random_blocks` random key blocks (models/attention/random.cpp, seeded by `seed`).
// The paper counts everything in blocks of 64 (window 3 blocks, 2 global blocks, 3 random blocks); here the
// window and the globals are in positions and the random draws in blocks of `block`. Causal: the window looks
// back, the globals are a prefix, the random blocks are drawn from the past. Cost O(N (2 window + 1 + globals +
// random_blocks block) D) plus O(globals N D).
#include "engine/error.h"
#include "models/attention/sparse_atoms.h"
#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

std::unique_ptr<Attention> make_bigbird(const AttentionConfig& c) {
  const int64_t w = c.options.get_int("window", 64, IntRange::at_least(0));
  const int64_t n = c.options.get_int("globals", 1, IntRange::at_least(0));
  const int64_t r = c.options.get_int("random_blocks", 3, IntRange{0, 65536});
  const uint64_t seed = c.options.get_seed("seed", c.seed);
  return std::make_unique<SparseAttention>("bigbird", c, [w, n, r, seed](const PatternGeometry& g) {
    std::vector<PatternPtr> parts;
    parts.push_back(band_pattern(g, w));
    if (n > 0) parts.push_back(global_pattern(g, n));
    if (r > 0) parts.push_back(random_pattern(g, r, seed));
    return union_of(g, std::move(parts));
  });
}

}  // namespace

ENG_REGISTER_ATTENTION(bigbird, "bigbird", "BigBird sparse attention: sliding window + global tokens + random key blocks",
                       make_bigbird);

}  // namespace eng
