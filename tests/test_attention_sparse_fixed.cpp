// `sparse-fixed`: == softmax attention under the dense mask of Child et al.'s fixed factors, A1 = the own block of
// `stride` positions, A2 = the last `summary` positions of every block, per head or merged.
#include <doctest/doctest.h>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

namespace {

DenseRule fixed(int64_t l, int64_t c, bool causal, bool merged) {
  return [=](int64_t h, int64_t i, int64_t j) {
    if (causal && j > i) return false;
    const bool a1 = i / l == j / l, a2 = j % l >= l - c;
    return merged ? a1 || a2 : h % 2 == 0 ? a1 : a2;
  };
}

}  // namespace

TEST_CASE("sparse-fixed == softmax attention with the dense fixed mask, per head and merged, causal and not") {
  // (stride, summary, block, n)
  const int64_t cases[][4] = {{6, 2, 8, 37}, {70, 5, 64, 150}, {4, 4, 3, 20}};
  for (bool causal : {false, true})
    for (bool merged : {false, true})
      for (const auto& c : cases)
        check_sparse_pattern({"sparse-fixed",
                              {{"stride", std::to_string(c[0])},
                               {"summary", std::to_string(c[1])},
                               {"block", std::to_string(c[2])},
                               {"factorize", merged ? "merged" : "heads"}},
                              merged ? 1 : 2,
                              c[3],
                              causal},
                             fixed(c[0], c[1], causal, merged));
  // the default summary is stride / 8
  check_sparse_pattern({"sparse-fixed", {{"stride", "16"}, {"block", "8"}}, 2, 40, true}, fixed(16, 2, true, false));
}

TEST_CASE("sparse-fixed: peak memory at N = 16384 below an N x N buffer") {
  check_sparse_memory({"sparse-fixed", {{"stride", "512"}, {"summary", "32"}}, 2, 16384, true});
}

TEST_CASE("sparse-fixed: options and errors") {
  CHECK_THROWS_WITH(make_sparse_variant({"sparse-fixed", {{"stride", "8"}, {"summary", "9"}}, 2, 0, false}),
                    "attention 'sparse-fixed': option summary expects an integer in 1..8, got '9'");
  CHECK_THROWS_WITH(make_sparse_variant({"sparse-fixed", {{"summary", "0"}}, 2, 0, false}),
                    "attention 'sparse-fixed': option summary expects an integer in 1..64, got '0'");
}
