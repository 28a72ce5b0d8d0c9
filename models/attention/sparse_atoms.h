// The atomic patterns of position-based sparse attention (Lin et al. 2021, §4.1.1, Fig. 4), from which the
// compound variants are built. Each is defined, and registered as a variant of its own, in
// models/attention/<name>.cpp; positions i (query) and j (key) are 0 .. n-1, and in a causal geometry every atom
// also requires j <= i.
#pragma once
#include <cstdint>

#include "models/attention/sparse_pattern.h"

namespace eng {

// global: positions 0 .. globals-1 attend to every position and every position attends to them.
PatternPtr global_pattern(const PatternGeometry& g, int64_t globals);
// band (sliding window): |i - j| <= window.
PatternPtr band_pattern(const PatternGeometry& g, int64_t window);
// dilated: i - j a multiple of dilation and |i - j| <= window * dilation (window keys on each side).
PatternPtr dilated_pattern(const PatternGeometry& g, int64_t window, int64_t dilation);
// random: per head and query block, `count` distinct key blocks drawn uniformly (from the blocks not after the
// query block when causal) by Philox with key `seed`; query i sees key j when j's block was drawn for i's block.
PatternPtr random_pattern(const PatternGeometry& g, int64_t count, uint64_t seed);
// block-local: i and j in the same block of g.block positions.
PatternPtr block_local_pattern(const PatternGeometry& g);

}  // namespace eng
