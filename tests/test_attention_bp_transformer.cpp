// `bp-transformer`: == softmax attention under the dense mask of the binary-partition graph, built here from the
// definition: the positions are T tokens then ceil(T / 2^l) span nodes per level l; tokens see tokens within k
// and the k spans on each side of their own span per level; span nodes see themselves and their two children.
#include <doctest/doctest.h>

#include <cstdlib>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

namespace {

struct Node {
  int64_t level, index;
};

std::vector<Node> tree(int64_t T) {
  std::vector<Node> p;
  for (int64_t t = 0; t < T; ++t) p.push_back({0, t});
  int64_t count = T;
  for (int64_t l = 1; count > 1; ++l) {
    count = (T + (int64_t(1) << l) - 1) >> l;
    for (int64_t m = 0; m < count; ++m) p.push_back({l, m});
  }
  return p;
}

DenseRule bp_rule(int64_t T, int64_t k, bool causal) {
  return [=, p = tree(T)](int64_t, int64_t i, int64_t j) {
    const Node a = p[size_t(i)], b = p[size_t(j)];
    if (a.level > 0) return i == j || (b.level == a.level - 1 && b.index / 2 == a.index);
    if (b.level == 0) return causal ? i - j >= 0 && i - j <= k : std::abs(i - j) <= k;
    const int64_t d = a.index / (int64_t(1) << b.level) - b.index;
    return causal ? d >= 1 && d <= k : std::abs(d) >= 1 && std::abs(d) <= k;
  };
}

}  // namespace

TEST_CASE("bp-transformer == softmax attention with the dense binary-partition mask, causal and not") {
  CHECK(tree(20).size() == 41);
  for (bool causal : {false, true}) {
    check_sparse_pattern({"bp-transformer", {{"window", "2"}, {"block", "8"}}, 2, 41, causal}, bp_rule(20, 2, causal));
    check_sparse_pattern({"bp-transformer", {{"window", "3"}}, 1, int64_t(tree(70).size()), causal},
                         bp_rule(70, 3, causal));
  }
}

TEST_CASE("bp-transformer: peak memory at N = 16383 (8192 tokens) below an N x N buffer") {
  CHECK(tree(8192).size() == 16383);
  check_sparse_memory({"bp-transformer", {}, 2, 16383, true});
}

TEST_CASE("bp-transformer: a length that is no tokens-plus-nodes layout is an error") {
  auto attn = make_sparse_variant({"bp-transformer", {}, 1, 0, false});
  const Tensor x = zeros({1, 1, 42, 4}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(x, x, x, {}),
                    "attention 'bp-transformer': 42 positions are not T tokens followed by their span nodes (20 tokens "
                    "make 41 positions, 21 make 44)");
  CHECK_THROWS_WITH(make_sparse_variant({"bp-transformer", {{"window", "-1"}}, 1, 0, false}),
                    "attention 'bp-transformer': option window expects an integer >= 0, got '-1'");
}
