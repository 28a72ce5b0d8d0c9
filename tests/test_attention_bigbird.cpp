// `bigbird`: == softmax attention under the dense mask "band, or global, or a randomly drawn block" (the draws
// read again from their documented definition, tests/sparse_check.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

TEST_CASE("bigbird == softmax attention with the dense band + global + random mask, causal and not") {
  for (bool causal : {false, true})
    for (int64_t block : {8, 64}) {
      const int64_t n = block == 8 ? 45 : 150, w = 3, g = 2, r = 2;
      check_sparse_pattern(
          {"bigbird",
           {{"block", std::to_string(block)}, {"window", "3"}, {"globals", "2"}, {"random_blocks", "2"}, {"seed", "7"}},
           2,
           n,
           causal},
          [=](int64_t h, int64_t i, int64_t j) {
            if (causal && j > i) return false;
            const int64_t b = i / block, m = causal ? b + 1 : (n + block - 1) / block;
            const auto d = drawn_blocks(7, h, b, m, r);
            return std::abs(i - j) <= w || i < g || j < g || std::find(d.begin(), d.end(), j / block) != d.end();
          });
    }
}

TEST_CASE("bigbird: peak memory at N = 16384 below an N x N buffer") {
  check_sparse_memory({"bigbird", {}, 2, 16384, true});
}

TEST_CASE("bigbird: options and errors") {
  CHECK_THROWS_WITH(make_sparse_variant({"bigbird", {{"random_blocks", "-1"}}, 2, 0, false}),
                    "attention 'bigbird': option random_blocks expects an integer in 0..65536, got '-1'");
  CHECK_THROWS_WITH(make_sparse_variant({"bigbird", {{"globals", "-1"}}, 2, 0, false}),
                    "attention 'bigbird': option globals expects an integer >= 0, got '-1'");
}
