// `global`: == softmax attention under the dense mask "i or j is one of the first `globals` positions".
#include <doctest/doctest.h>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

TEST_CASE("global == softmax attention with the dense global-node mask, causal and not") {
  for (bool causal : {false, true})
    for (int64_t block : {8, 64})
      for (int64_t g : {1, 11}) {
        const int64_t n = block == 8 ? 37 : 150;
        check_sparse_pattern(
            {"global", {{"globals", std::to_string(g)}, {"block", std::to_string(block)}}, 2, n, causal},
            [=](int64_t, int64_t i, int64_t j) { return (i < g || j < g) && (!causal || j <= i); });
      }
}

TEST_CASE("global: peak memory at N = 16384 below an N x N buffer") {
  check_sparse_memory({"global", {{"globals", "16"}}, 2, 16384, false});
}

TEST_CASE("global: options and errors") {
  CHECK_THROWS_WITH(make_sparse_variant({"global", {{"globals", "0"}}, 2, 0, false}),
                    "attention 'global': option globals expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(make_sparse_variant({"global", {{"globals", "x"}}, 2, 0, false}),
                    "attention 'global': option globals expects an integer >= 1, got 'x'");
}
