// `dilated`: == softmax attention under the dense mask "i - j a multiple of dilation, |i - j| <= window dilation".
#include <doctest/doctest.h>

#include <cstdlib>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

TEST_CASE("dilated == softmax attention with the dense dilated-window mask, causal and not") {
  // (window, dilation, block, n): dilations below and above the block size
  const int64_t cases[][4] = {{4, 3, 8, 37}, {2, 70, 64, 150}, {3, 1, 16, 40}, {2, 9, 4, 45}};
  for (bool causal : {false, true})
    for (const auto& c : cases) {
      const int64_t w = c[0], d = c[1];
      check_sparse_pattern(
          {"dilated",
           {{"window", std::to_string(w)}, {"dilation", std::to_string(d)}, {"block", std::to_string(c[2])}},
           2,
           c[3],
           causal},
          [=](int64_t, int64_t i, int64_t j) {
            return (!causal || j <= i) && std::abs(i - j) <= w * d && (i - j) % d == 0;
          });
    }
}

TEST_CASE("dilated: peak memory at N = 16384 below an N x N buffer") {
  check_sparse_memory({"dilated", {{"window", "32"}, {"dilation", "2"}}, 2, 16384, true});
}

TEST_CASE("dilated: options and errors") {
  CHECK_THROWS_WITH(make_sparse_variant({"dilated", {{"dilation", "0"}}, 2, 0, false}),
                    "attention 'dilated': option dilation expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(make_sparse_variant({"dilated", {{"window", "-2"}}, 2, 0, false}),
                    "attention 'dilated': option window expects an integer >= 0, got '-2'");
}
