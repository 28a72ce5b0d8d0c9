// `random`: == softmax attention under the dense mask of the seeded block draws, read again from the documented
// definition (tests/sparse_check.h: drawn_blocks).
#include <doctest/doctest.h>

#include <algorithm>

#include "models/attention/sparse_attention.h"
#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

namespace {

DenseRule random_rule(uint64_t seed, int64_t block, int64_t n, int64_t count, bool causal) {
  return [=](int64_t h, int64_t i, int64_t j) {
    const int64_t b = i / block, m = causal ? b + 1 : (n + block - 1) / block;
    const auto d = drawn_blocks(seed, h, b, m, count);
    return (!causal || j <= i) && std::find(d.begin(), d.end(), j / block) != d.end();
  };
}

}  // namespace

TEST_CASE("random == softmax attention with the dense mask of the seeded draws, causal and not") {
  for (bool causal : {false, true})
    for (int64_t count : {0, 2, 9}) {  // none, a few, more than there are blocks
      check_sparse_pattern(
          {"random", {{"random_blocks", std::to_string(count)}, {"block", "8"}, {"seed", "5"}}, 2, 37, causal},
          random_rule(5, 8, 37, count, causal));
    }
  check_sparse_pattern({"random", {{"random_blocks", "1"}, {"seed", "3"}}, 3, 150, false},
                       random_rule(3, 64, 150, 1, false));
}

TEST_CASE("random: the seed and the head change the draws; the model's seed is the default") {
  auto pattern = [](const SparseCase& c) {
    auto a = make_sparse_variant(c);
    return dynamic_cast<SparseAttention&>(*a).layout(2, 256, 256, 0, false);
  };
  const auto a = pattern({"random", {{"block", "8"}, {"seed", "1"}}, 2, 256, false});
  const auto b = pattern({"random", {{"block", "8"}, {"seed", "2"}}, 2, 256, false});
  CHECK(a->heads == 2);
  CHECK(a->key_block != b->key_block);
  int64_t differ = 0;
  for (int64_t j = 0; j < 256; ++j) differ += a->allowed(0, 0, j) != a->allowed(1, 0, j);
  CHECK(differ > 0);
  AttentionConfig cfg;
  cfg.heads = 2;
  cfg.seed = 1;
  cfg.options.set("block", "8");
  auto c = make_attention("random", cfg);
  CHECK(dynamic_cast<SparseAttention&>(*c).layout(2, 256, 256, 0, false)->key_block == a->key_block);
}

TEST_CASE("random: peak memory at N = 16384 below an N x N buffer") {
  check_sparse_memory({"random", {{"random_blocks", "3"}}, 2, 16384, true});
}

TEST_CASE("random: options and errors") {
  CHECK_THROWS_WITH(make_sparse_variant({"random", {{"random_blocks", "-1"}}, 2, 0, false}),
                    "attention 'random': option random_blocks expects an integer in 0..65536, got '-1'");
  CHECK_THROWS_WITH(make_sparse_variant({"random", {{"random_blocks", "70000"}}, 2, 0, false}),
                    "attention 'random': option random_blocks expects an integer in 0..65536, got '70000'");
  CHECK_THROWS_WITH(make_sparse_variant({"random", {{"seed", "-3"}}, 2, 0, false}),
                    "attention 'random': option seed expects an integer >= 0, got '-3'");
}
