// `star`: == softmax attention under the dense mask "|i - j| <= 1, or i or j is the relay node 0"; no causal form.
#include <doctest/doctest.h>

#include <cstdlib>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

TEST_CASE("star == softmax attention with the dense band-3 plus relay mask") {
  for (int64_t block : {8, 64}) {
    const int64_t n = block == 8 ? 37 : 150;
    check_sparse_pattern({"star", {{"block", std::to_string(block)}}, 2, n, false},
                         [](int64_t, int64_t i, int64_t j) { return std::abs(i - j) <= 1 || i == 0 || j == 0; });
  }
}

TEST_CASE("star: peak memory at N = 16384 below an N x N buffer") {
  check_sparse_memory({"star", {}, 2, 16384, false});
}

TEST_CASE("star: refuses a causal model and a causal mask") {
  const char* refused = "attention 'star': does not take a causal mask (the pattern is the mask, and it has no causal "
                        "form: the relay node gathers the whole sequence); it takes: non-causal, key padding, ALiBi, "
                        "cross-attention";
  CHECK_THROWS_WITH(make_sparse_variant({"star", {}, 2, 0, true}), refused);
  auto attn = make_sparse_variant({"star", {}, 1, 0, false});
  const Tensor x = zeros({1, 1, 5, 4}, DType::F64);
  AttentionMask m;
  m.causal = true;
  CHECK_THROWS_WITH(attn->forward(x, x, x, m), refused);
  CHECK_THROWS_WITH(make_sparse_variant({"star", {{"window", "2"}}, 2, 0, false}),
                    "attention 'star': unknown option 'window'");
}
