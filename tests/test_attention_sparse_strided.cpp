// `sparse-strided`: == softmax attention under the dense mask of Child et al.'s strided factors, A1 = the last
// `stride` positions, A2 = every stride-th position (both directions when not causal), per head or merged.
#include <doctest/doctest.h>

#include <cstdlib>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

namespace {

DenseRule strided(int64_t l, bool causal, bool merged) {
  return [=](int64_t h, int64_t i, int64_t j) {
    if (causal && j > i) return false;
    const bool a1 = std::abs(i - j) <= l, a2 = (i - j) % l == 0;
    return merged ? a1 || a2 : h % 2 == 0 ? a1 : a2;
  };
}

}  // namespace

TEST_CASE("sparse-strided == softmax attention with the dense strided mask, per head and merged, causal and not") {
  // (stride, block, n): strides below and above the block size
  const int64_t cases[][3] = {{5, 8, 37}, {70, 64, 150}, {3, 4, 30}};
  for (bool causal : {false, true})
    for (bool merged : {false, true})
      for (const auto& c : cases)
        check_sparse_pattern({"sparse-strided",
                              {{"stride", std::to_string(c[0])},
                               {"block", std::to_string(c[1])},
                               {"factorize", merged ? "merged" : "heads"}},
                              merged ? 1 : 3,
                              c[2],
                              causal},
                             strided(c[0], causal, merged));
}

TEST_CASE("sparse-strided: peak memory at N = 16384 below an N x N buffer") {
  check_sparse_memory({"sparse-strided", {{"stride", "128"}, {"block", "8"}}, 2, 16384, true});
}

TEST_CASE("sparse-strided: options and errors") {
  CHECK_THROWS_WITH(
      make_sparse_variant({"sparse-strided", {}, 1, 0, false}),
      "attention 'sparse-strided': factorize=heads needs at least 2 heads (one per part), the model has 1; "
      "use factorize=merged");
  CHECK_THROWS_WITH(make_sparse_variant({"sparse-strided", {{"factorize", "layers"}}, 2, 0, false}),
                    "attention 'sparse-strided': option factorize must be heads or merged, got 'layers'");
  CHECK_THROWS_WITH(make_sparse_variant({"sparse-strided", {{"stride", "0"}}, 2, 0, false}),
                    "attention 'sparse-strided': option stride expects an integer >= 1, got '0'");
  auto attn = make_sparse_variant({"sparse-strided", {}, 2, 0, false});
  const Tensor x = zeros({1, 1, 5, 4}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(x, x, x, {}),
                    "attention 'sparse-strided': factorize=heads needs at least 2 heads, the input has 1");
}
