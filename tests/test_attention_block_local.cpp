// `block-local`: == softmax attention under the dense mask "i and j in the same block".
#include <doctest/doctest.h>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

TEST_CASE("block-local == softmax attention with the dense same-block mask, causal and not") {
  for (bool causal : {false, true})
    for (int64_t block : {5, 8, 64}) {
      const int64_t n = block == 64 ? 150 : 37;
      check_sparse_pattern(
          {"block-local", {{"block", std::to_string(block)}}, 2, n, causal},
          [=](int64_t, int64_t i, int64_t j) { return i / block == j / block && (!causal || j <= i); });
    }
}

TEST_CASE("block-local: peak memory at N = 16384 below an N x N buffer") {
  check_sparse_memory({"block-local", {}, 2, 16384, true});
}

TEST_CASE("block-local: options and errors") {
  CHECK_THROWS_WITH(make_sparse_variant({"block-local", {{"window", "3"}}, 2, 0, false}),
                    "attention 'block-local': unknown option 'window'");
}
