// `etc`: == softmax attention under the dense mask "i or j is one of the first `globals` (external global)
// positions, or |i - j| <= window"; no causal form.
#include <doctest/doctest.h>

#include <cstdlib>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

TEST_CASE("etc == softmax attention with the dense global-local mask") {
  for (int64_t block : {8, 64}) {
    const int64_t n = block == 8 ? 37 : 150, g = 3, w = 4;
    check_sparse_pattern({"etc", {{"block", std::to_string(block)}, {"globals", "3"}, {"window", "4"}}, 2, n, false},
                         [=](int64_t, int64_t i, int64_t j) { return i < g || j < g || std::abs(i - j) <= w; });
  }
}

TEST_CASE("etc: peak memory at N = 16384 below an N x N buffer") {
  check_sparse_memory({"etc", {{"globals", "2"}}, 2, 16384, false});
}

TEST_CASE("etc: refuses a causal model; options") {
  CHECK_THROWS_WITH(make_sparse_variant({"etc", {}, 2, 0, true}),
                    "attention 'etc': does not take a causal mask (the pattern is the mask, and it has no causal form: "
                    "the global tokens summarise the whole input); it takes: non-causal, key padding, ALiBi, "
                    "cross-attention");
  CHECK_THROWS_WITH(make_sparse_variant({"etc", {{"globals", "0"}}, 2, 0, false}),
                    "attention 'etc': option globals expects an integer >= 1, got '0'");
}
