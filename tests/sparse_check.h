// What every position-based sparse variant's test checks (tests/test_attention_<name>.cpp): the variant, built
// through the registry, equals naive softmax attention (ops/attention_naive.h) under the dense keep mask that the
// test builds from its own, independent reading of the pattern's definition; and it never allocates an N x N
// buffer.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "models/attention/attention.h"

namespace eng::test {

// Whether query position i may attend key position j in head h, causality included.
using DenseRule = std::function<bool(int64_t h, int64_t i, int64_t j)>;

struct SparseCase {
  std::string variant;
  std::vector<std::pair<std::string, std::string>> options;
  int64_t heads = 2, n = 0;
  bool causal = false;  // a causal model: AttentionConfig::causal and mask.causal
};

// The variant of the case, built through the registry.
std::unique_ptr<Attention> make_sparse_variant(const SparseCase& c);

// Outputs and gradients of q, k, v (f64) == naive_attention with keep = rule: a batch of 2 whose second element
// pads the keys from n / 3 on (its rows without a key must be exact zeros), then the last 2n/3 queries alone
// (query_offset n / 3).
void check_sparse_pattern(const SparseCase& c, const DenseRule& rule);

// The key blocks the random pattern draws for head h, query block b, out of m blocks, as documented in
// models/attention/random.cpp (Floyd's sampling over the Philox stream of key `seed` from word (h << 40) + (b << 16)),
// written out again here so that the tests do not call the pattern code.
std::vector<int64_t> drawn_blocks(uint64_t seed, int64_t h, int64_t b, int64_t m, int64_t count);

// Forward + backward at c.n (f32, batch 1, head dim 8): the allocator's peak plus the layout's bytes stay below
// n * n * 4, the size of one n x n f32 buffer.
void check_sparse_memory(const SparseCase& c);

}  // namespace eng::test
