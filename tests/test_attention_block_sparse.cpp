// The block-sparse attention op (ops/attention_block_sparse.h) and its layout (ops/block_sparse_layout.h):
// finite differences, equality with naive attention under the layout's dense mask, empty rows, schedules.
#include <cmath>
#include <limits>

#include "engine/threadpool.h"
#include "ops/attention_block_sparse.h"
#include "ops/attention_naive.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

using Layout = std::shared_ptr<const BlockSparseLayout>;

// A pseudo-random rule of about `density`, different per head, from a hash of (h, i, j).
ElementRule hashed(double density, uint64_t salt) {
  return [density, salt](int64_t h, int64_t i, int64_t j) {
    uint64_t x = (uint64_t(h) * 1000003 + uint64_t(i)) * 998244353 + uint64_t(j) + salt * 0x9E3779B97F4A7C15ULL;
    x ^= x >> 29, x *= 0xBF58476D1CE4E5B9ULL, x ^= x >> 32;
    return double(x % 1000) < density * 1000;
  };
}

// Every key block, so that `rule` alone decides.
BlockLister all_blocks(int64_t nkb) {
  return [nkb](int64_t, int64_t, std::vector<int64_t>& out) {
    for (int64_t kb = 0; kb < nkb; ++kb) out.push_back(kb);
  };
}

Layout layout_of(int64_t heads, int64_t Lq, int64_t Lk, int64_t block, const ElementRule& rule) {
  return std::make_shared<const BlockSparseLayout>(
      build_block_sparse_layout(heads, Lq, Lk, block, all_blocks((Lk + block - 1) / block), rule));
}

// keep [1 or B, H, Lq, Lk] from the layout (head 0 for every head when it is shared).
Tensor keep_of(const BlockSparseLayout& L, int64_t H) {
  std::vector<double> keep;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L.Lq; ++i)
      for (int64_t j = 0; j < L.Lk; ++j) keep.push_back(L.allowed(L.heads == 1 ? 0 : h, i, j) ? 1 : 0);
  return from_vector(keep, {1, H, L.Lq, L.Lk}, DType::F64);
}

std::vector<Tensor> run(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& x) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : x) leaves.push_back(t.clone().detach().set_requires_grad(true));
  Tensor out = f(leaves);
  out.backward(uniform(out.shape(), 99).to(out.dtype()));
  return {out.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
}

std::vector<Tensor> qkv(int64_t B, int64_t H, int64_t Lq, int64_t Lk, uint64_t seed, DType dtype = DType::F64) {
  return {uniform({B, H, Lq, 5}, seed, -2, 2).to(dtype), uniform({B, H, Lk, 5}, seed + 1, -2, 2).to(dtype),
          uniform({B, H, Lk, 3}, seed + 2).to(dtype)};
}

// block_sparse_attention == naive_attention with keep = the layout, outputs and gradients.
void check_matches_naive(const std::vector<Tensor>& x, const AttentionMask& mask, const Layout& L, double tol) {
  AttentionMask dense = mask;
  dense.keep = keep_of(*L, x[0].size(1));
  auto got = run([&](auto t) { return block_sparse_attention(t[0], t[1], t[2], mask, L, 0.6); }, x);
  auto want = run([&](auto t) { return naive_attention(t[0], t[1], t[2], dense, 0.6); }, x);
  const char* what[] = {"output", "dq", "dk", "dv"};
  for (size_t t = 0; t < 4; ++t) {
    bool finite = true;
    for (double v : got[t].to_vector()) finite = finite && std::isfinite(v);
    CHECK_MESSAGE(finite, what[t]);
    CHECK_MESSAGE(eng::test::allclose(got[t], want[t], tol, tol), what[t], " differs by ",
                  eng::test::max_abs_diff(got[t], want[t]));
  }
}

}  // namespace

GRADCHECK("block_sparse_attention") {
  const std::vector<Tensor> x{uniform({2, 2, 7, 3}, 1), uniform({2, 2, 9, 3}, 2), uniform({2, 2, 9, 2}, 3)};
  const Layout per_head = layout_of(2, 7, 9, 3, hashed(0.5, 1));  // partial blocks at both edges
  check_gradients([per_head](auto t) { return block_sparse_attention(t[0], t[1], t[2], {}, per_head, 0.7); }, x);
  const Layout shared = layout_of(1, 7, 9, 2, hashed(0.6, 2));
  AttentionMask m;
  m.causal = true;
  m.query_offset = 2;
  m.key_lengths = {9, 0};  // batch element 1 sees no key: zero output, zero gradient
  m.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  check_gradients([shared, m](auto t) { return block_sparse_attention(t[0], t[1], t[2], m, shared, 0.7); }, x);
  // strided inputs are read in place
  const std::vector<Tensor> y{uniform({2, 7, 2, 3}, 4), uniform({2, 2, 3, 9}, 5), uniform({2, 2, 9, 2}, 6)};
  check_gradients(
      [per_head](auto t) {
        return block_sparse_attention(transpose(t[0], 1, 2), transpose(t[1], 2, 3), t[2], {}, per_head, 0.7);
      },
      y);
}

TEST_CASE("block_sparse_layout: drops empty blocks, stores full ones without bits, transposes, looks up") {
  // keys 0..9, blocks of 4: query block 0 sees block 0 fully, block 1 partly; block 2 is listed but empty
  auto rule = [](int64_t, int64_t i, int64_t j) { return j < 4 || (i < 4 && j == 5); };
  BlockSparseLayout L = build_block_sparse_layout(1, 6, 10, 4, all_blocks(3), rule);
  CHECK(L.q_blocks() == 2);
  CHECK(L.k_blocks() == 3);
  CHECK(L.row_start == std::vector<int64_t>{0, 2, 3});
  CHECK(L.key_block == std::vector<int64_t>{0, 1, 0});
  CHECK(L.bits_at == std::vector<int64_t>{-1, 0, -1});
  CHECK(L.bits.size() == 4);
  CHECK(L.col_start == std::vector<int64_t>{0, 2, 3, 3});
  CHECK(L.col_entry == std::vector<int64_t>{0, 2, 1});
  CHECK(L.col_qblock == std::vector<int64_t>{0, 1, 0});
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 10; ++j) CHECK(L.allowed(0, i, j) == rule(0, i, j));
  CHECK(L.bytes() > 0);
  auto bad = [](int64_t, int64_t qb, std::vector<int64_t>& out) {  // one bad row, whatever the threads' order
    if (qb == 1) out.push_back(3);
  };
  CHECK_THROWS_WITH(build_block_sparse_layout(1, 6, 10, 4, bad, rule),
                    "block_sparse_layout: key block 3 listed for query block 1 of head 0 is outside [0, 3)");
  CHECK_THROWS_WITH(build_block_sparse_layout(1, 6, 10, 0, bad, rule),
                    "block_sparse_layout: needs heads >= 1, lengths >= 0 and block >= 1, got heads 1, Lq 6, Lk 10, "
                    "block 0");
  // blocks wider than 64 keys use several words per row
  auto wide = hashed(0.3, 3);
  BlockSparseLayout W = build_block_sparse_layout(2, 150, 150, 100, all_blocks(2), wide);
  CHECK(W.words() == 2);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 150; ++i)
      for (int64_t j = 0; j < 150; ++j) REQUIRE(W.allowed(h, i, j) == wide(h, i, j));
}

TEST_CASE("block_sparse_attention == naive_attention with the layout's dense mask") {
  SUBCASE("per-head layouts, block sizes 1 to 100, lengths not multiples of the block") {
    for (int64_t block : {1, 4, 7, 16, 64, 100}) {
      CAPTURE(block);
      const Layout L = layout_of(3, 70, 83, block, hashed(0.3, uint64_t(block)));
      check_matches_naive(qkv(2, 3, 70, 83, uint64_t(block)), {}, L, 1e-12);
    }
  }
  SUBCASE("shared layout; causal with offset, padding and ALiBi on top") {
    const Layout L = layout_of(1, 50, 75, 16, hashed(0.5, 7));
    AttentionMask m;
    m.causal = true;
    m.query_offset = 20;
    m.key_lengths = {75, 30};
    m.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
    check_matches_naive(qkv(2, 2, 50, 75, 11), m, L, 1e-12);
  }
  SUBCASE("f32") {
    check_matches_naive(qkv(1, 2, 130, 130, 12, DType::F32), {}, layout_of(2, 130, 130, 64, hashed(0.7, 8)), 1e-5);
  }
  SUBCASE("a dense layout is softmax attention") {
    check_matches_naive(qkv(1, 1, 65, 65, 13), {},
                        layout_of(1, 65, 65, 64, [](int64_t, int64_t, int64_t) { return true; }), 1e-12);
  }
}

TEST_CASE("block_sparse_attention: rows without a key give exact zeros and no NaN") {
  // queries 3..5 see nothing; batch element 1 sees no key at all
  const Layout L = layout_of(1, 9, 9, 4, [](int64_t, int64_t i, int64_t j) { return (i < 3 || i > 5) && j % 2 == 0; });
  AttentionMask m;
  m.key_lengths = {9, 0};
  const auto x = qkv(2, 2, 9, 9, 21);
  auto r = run([&](auto t) { return block_sparse_attention(t[0], t[1], t[2], m, L, 0.5); }, x);
  for (const Tensor& t : r)
    for (double v : t.to_vector()) CHECK(std::isfinite(v));
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 9; ++i)
      for (int64_t d = 0; d < 3; ++d) {
        if (i >= 3 && i <= 5) CHECK(r[0].at({0, h, i, d}) == 0);
        CHECK(r[0].at({1, h, i, d}) == 0);
        CHECK(r[3].at({1, h, i, d}) == 0);
      }
  check_matches_naive(x, m, L, 1e-12);
}

TEST_CASE("block_sparse_attention: the backward schedule and the thread count do not change results") {
  const int before = num_threads();
  const auto x = qkv(2, 2, 100, 90, 31);
  const Layout L = layout_of(2, 100, 90, 16, hashed(0.4, 9));
  AttentionMask m;
  m.key_lengths = {90, 70};
  std::vector<Tensor> ref;
  for (int threads : {1, 3}) {  // 1 thread: one task per head; 3 threads: key-block and query-block passes
    set_num_threads(threads);
    auto r = run([&](auto t) { return block_sparse_attention(t[0], t[1], t[2], m, L, 0.5); }, x);
    if (ref.empty()) ref = r;
    for (size_t i = 0; i < 4; ++i) CHECK(eng::test::max_abs_diff(r[i], ref[i]) == 0);
  }
  set_num_threads(before);
}

TEST_CASE("block_sparse_attention: errors name the op and the shapes") {
  const auto x = qkv(2, 2, 5, 7, 41);
  const Layout L = layout_of(2, 5, 7, 4, hashed(0.5, 1));
  AttentionMask keep;
  keep.keep = ones({5, 7});
  CHECK_THROWS_WITH(block_sparse_attention(x[0], x[1], x[2], keep, L, 1),
                    "block_sparse_attention: keep and bias masks are dense [2, 2, 5, 7]; put the pattern in the "
                    "layout instead");
  CHECK_THROWS_WITH(block_sparse_attention(x[0], x[1], x[2], {}, layout_of(3, 5, 7, 4, hashed(0.5, 1)), 1),
                    "block_sparse_attention: the layout has 3 heads, the input 2 (a layout has 1 head, shared, or one "
                    "per head)");
  CHECK_THROWS_WITH(block_sparse_attention(x[0], x[1], x[2], {}, layout_of(2, 6, 7, 4, hashed(0.5, 1)), 1),
                    "block_sparse_attention: the layout is for 6 queries and 7 keys, the input has 5 and 7");
  CHECK_THROWS_WITH(block_sparse_attention(x[0], x[1], x[2], {}, nullptr, 1), "block_sparse_attention: no layout");
  CHECK_THROWS_WITH(block_sparse_attention(x[0], zeros({2, 2, 7, 4}, DType::F64), x[2], {}, L, 1),
                    "block_sparse_attention: q [2, 2, 5, 5] and k [2, 2, 7, 4] differ in batch, heads or head dim");
  AttentionMask m;
  m.key_lengths = {7};
  CHECK_THROWS_WITH(block_sparse_attention(x[0], x[1], x[2], m, L, 1),
                    "block_sparse_attention: key_lengths has 1 entries for a batch of 2");
}
