// `band`: == softmax attention under the dense band mask |i - j| <= window (causal: 0 <= i - j <= window).
#include <doctest/doctest.h>

#include <cstdlib>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

TEST_CASE("band == softmax attention with the dense band mask, causal and not, lengths not multiples of the block") {
  for (bool causal : {false, true})
    for (int64_t block : {8, 64}) {
      const int64_t n = block == 8 ? 37 : 150, w = 5;
      check_sparse_pattern(
          {"band", {{"window", "5"}, {"block", std::to_string(block)}}, 2, n, causal},
          [=](int64_t, int64_t i, int64_t j) { return causal ? j <= i && i - j <= w : std::abs(i - j) <= w; });
    }
  // window 0: the diagonal; a window wider than the sequence: dense
  check_sparse_pattern({"band", {{"window", "0"}, {"block", "4"}}, 1, 10, false},
                       [](int64_t, int64_t i, int64_t j) { return i == j; });
  check_sparse_pattern({"band", {{"window", "100"}, {"block", "16"}}, 1, 40, true},
                       [](int64_t, int64_t i, int64_t j) { return j <= i; });
}

TEST_CASE("band: peak memory at N = 16384 below an N x N buffer") {
  check_sparse_memory({"band", {{"window", "64"}}, 2, 16384, true});
}

TEST_CASE("band: options and errors") {
  CHECK_THROWS_WITH(make_sparse_variant({"band", {{"window", "-1"}}, 2, 0, false}),
                    "attention 'band': option window expects an integer >= 0, got '-1'");
  CHECK_THROWS_WITH(make_sparse_variant({"band", {{"block", "0"}}, 2, 0, false}),
                    "attention 'band': option block expects an integer in 1..256, got '0'");
  CHECK_THROWS_WITH(make_sparse_variant({"band", {{"block", "300"}}, 2, 0, false}),
                    "attention 'band': option block expects an integer in 1..256, got '300'");
  CHECK_THROWS_WITH(make_sparse_variant({"band", {{"scale", "0"}}, 2, 0, false}),
                    "attention 'band': option scale expects a finite number > 0, got '0'");
  CHECK_THROWS_WITH(make_sparse_variant({"band", {{"stride", "4"}}, 2, 0, false}),
                    "attention 'band': unknown option 'stride'");
  auto attn = make_sparse_variant({"band", {}, 1, 0, false});
  CHECK(attn->name() == "band");
  const Tensor x = zeros({1, 1, 5, 4}, DType::F64), k = zeros({1, 1, 4, 4}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(x, k, k, {}),
                    "attention 'band': a position-based pattern needs its queries inside the key sequence, got 5 "
                    "queries from position 0 against 4 keys");
  AttentionMask keep;
  keep.keep = ones({5, 5});
  CHECK_THROWS_WITH(attn->forward(x, x, x, keep),
                    "attention 'band': does not take a keep mask (the pattern is the mask); it takes: causal, "
                    "non-causal, key padding, ALiBi, query offset, cross-attention");
}
