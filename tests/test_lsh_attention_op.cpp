// The fused LSH chunk attention op (ops/lsh_attention.h) against its definition read naively (each query's visible
// keys listed one by one), finite-difference gradients of o and z, independence from the thread count, and errors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/threadpool.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/lsh_attention.h"
#include "ops/reduce.h"
#include "ops/select.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

constexpr double kSelf = -1e5;

// Random sorted orders (the argsort of uniform keys per head and round); key_end causal, query `hidden` of batch
// element 0 seeing no key at all, and batch element 1 padded to `len1` keys.
std::shared_ptr<LshChunkLayout> make_layout(int64_t B, int64_t H, int64_t R, int64_t N, int64_t c, bool dedup,
                                            int64_t hidden, int64_t len1, uint64_t seed) {
  auto L = std::make_shared<LshChunkLayout>();
  L->B = B, L->H = H, L->R = R, L->N = N, L->c = c, L->nc = (N + c - 1) / c;
  L->dedup = dedup, L->self_logit = kSelf;
  const int64_t Np = L->slots();
  L->order.assign(size_t(B * H * R * Np), -1);
  L->slot.resize(size_t(B * H * R * N));
  const std::vector<double> u = uniform({B * H * R, N}, seed).to_vector();
  for (int64_t t = 0; t < B * H * R; ++t) {
    std::vector<int64_t> perm(static_cast<size_t>(N));
    std::iota(perm.begin(), perm.end(), int64_t(0));
    const double* ut = &u[size_t(t * N)];
    std::sort(perm.begin(), perm.end(), [ut](int64_t a, int64_t b) { return ut[a] < ut[b]; });
    for (int64_t s = 0; s < N; ++s) {
      L->order[size_t(t * Np + s)] = perm[size_t(s)];
      L->slot[size_t(t * N + perm[size_t(s)])] = s;
    }
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i) L->key_end.push_back(std::min(i + 1, b == 1 ? len1 : N));
  if (hidden >= 0) L->key_end[size_t(hidden)] = 0;
  return L;
}

// Window mode (Reformer's causal form): random buckets in [0, nb) per head and round, the positions sorted stably
// by bucket, chunks of c = min(w, N); key_end as make_layout's.
std::shared_ptr<LshChunkLayout> make_window_layout(int64_t B, int64_t H, int64_t R, int64_t N, int64_t w, int64_t nb,
                                                   bool dedup, uint64_t seed) {
  auto L = make_layout(B, H, R, N, std::min(w, N), dedup, 3, 5, seed);
  L->window = w;
  const std::vector<double> u = uniform({B * H * R, N}, seed + 1, 0, double(nb)).to_vector();
  for (int64_t t = 0; t < B * H * R; ++t) {
    std::vector<int64_t> perm(static_cast<size_t>(N));
    std::iota(perm.begin(), perm.end(), int64_t(0));
    for (int64_t i = 0; i < N; ++i) L->bucket.push_back(int64_t(u[size_t(t * N + i)]));
    const int64_t* bk = &L->bucket[size_t(t * N)];
    std::stable_sort(perm.begin(), perm.end(), [bk](int64_t a, int64_t b) { return bk[a] < bk[b]; });
    for (int64_t s = 0; s < N; ++s) {
      L->order[size_t(t * L->slots() + s)] = perm[size_t(s)];
      L->slot[size_t(t * N + perm[size_t(s)])] = s;
    }
  }
  return L;
}

// o [B, H, R, N, Dv] and z [B, H, R, N, 1] in f64 by the definition.
std::pair<Tensor, Tensor> naive(const Tensor& q, const Tensor& k, const Tensor& v, const LshChunkLayout& L,
                                double scale) {
  const int64_t B = L.B, H = L.H, R = L.R, N = L.N, c = L.c, nc = L.nc, D = q.size(3), Dv = v.size(3);
  const double inf = std::numeric_limits<double>::infinity();
  Tensor o = zeros({B, H, R, N, Dv}, DType::F64), z = zeros({B, H, R, N, 1}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bh = b * H + h;
      auto chunk_of = [&](int64_t r, int64_t i) { return L.slot[size_t((bh * R + r) * N + i)] / c; };
      auto near = [&](int64_t r, int64_t i, int64_t j) {
        if (L.window > 0) {  // j of i's bucket, at most window − 1 slots before i
          const size_t at = size_t((bh * R + r) * N);
          const int64_t gap = L.slot[at + size_t(i)] - L.slot[at + size_t(j)];
          return L.bucket[at + size_t(i)] == L.bucket[at + size_t(j)] && gap >= 0 && gap < L.window;
        }
        const int64_t ci = chunk_of(r, i), cj = chunk_of(r, j);
        return cj == ci || (nc > 1 && cj == (ci + nc - 1) % nc);
      };
      for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < N; ++i) {
          std::vector<std::pair<int64_t, double>> keys;
          for (int64_t j = 0; j < L.key_end[size_t(b * N + i)]; ++j) {
            if (!near(r, i, j)) continue;
            double l = 0;
            for (int64_t d = 0; d < D; ++d) l += q.at({b, h, i, d}) * k.at({b, h, j, d});
            l *= scale;
            int64_t n = 0;
            for (int64_t r2 = 0; r2 < R; ++r2) n += near(r2, i, j);
            if (L.dedup) l -= std::log(double(n));
            keys.push_back({j, j == i ? kSelf : l});
          }
          double m = -inf, s = 0;
          for (const auto& kv : keys) m = std::max(m, kv.second);
          for (const auto& kv : keys) s += std::exp(kv.second - m);
          z.set_at({b, h, r, i, 0}, keys.empty() ? -inf : m + std::log(s));
          for (const auto& kv : keys)
            for (int64_t e = 0; e < Dv; ++e) {
              const double p = std::exp(kv.second - m) / s;
              o.set_at({b, h, r, i, e}, o.at({b, h, r, i, e}) + p * v.at({b, h, kv.first, e}));
            }
        }
    }
  return {o, z};
}

// 1 where z <= limit: -inf for the rows with no visible key; -1e4 also marks the rows that see only their own key
// (z = -1e5, a constant whose size would swamp finite differences).
Tensor rows_below(const Tensor& z, double limit) {
  std::vector<double> e;
  for (double x : z.to_vector()) e.push_back(x <= limit ? 1.0 : 0.0);
  return from_vector(e, z.shape(), DType::I64);
}

}  // namespace

TEST_CASE("lsh_chunk_attention == the definition (padding slots, dedup, causal, a query with no key, f32 and f64)") {
  const int64_t B = 2, H = 2, N = 7, D = 3, Dv = 2;
  const Tensor q = uniform({B, H, N, D}, 1, -2, 2), k = uniform({B, H, N, D}, 2, -2, 2), v = uniform({B, H, N, Dv}, 3);
  struct Case {
    int64_t R, c;
    bool dedup;
  };
  for (const Case& cs : {Case{2, 3, true}, Case{2, 3, false}, Case{3, 2, true}, Case{1, 7, false}, Case{2, 4, true}}) {
    const auto L = make_layout(B, H, cs.R, N, cs.c, cs.dedup, 3, 5, 4);
    const auto want = naive(q, k, v, *L, 0.6);
    const auto got = lsh_chunk_attention(q, k, v, L, 0.6);
    CHECK(got.first.shape() == Shape{B, H, cs.R, N, Dv});
    CHECK(got.second.shape() == Shape{B, H, cs.R, N, 1});
    CHECK(max_abs_diff(got.first, want.first) < 1e-12);
    const Tensor hidden = rows_below(want.second, -std::numeric_limits<double>::infinity());
    CHECK(max_abs_diff(rows_below(got.second, -std::numeric_limits<double>::infinity()), hidden) == 0);
    CHECK(max_abs_diff(masked_fill(got.second, hidden, 0), masked_fill(want.second, hidden, 0)) < 1e-12);
    const auto f32 = lsh_chunk_attention(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), L, 0.6);
    CHECK(f32.first.dtype() == DType::F32);
    CHECK(max_abs_diff(f32.first, want.first) < 2e-5);
    CHECK(max_abs_diff(masked_fill(f32.second, hidden, 0), masked_fill(want.second, hidden, 0)) < 2e-5);
    for (int64_t r = 0; r < cs.R; ++r)  // the query with no visible key: o = 0
      for (int64_t e = 0; e < Dv; ++e) CHECK(got.first.at({0, 0, r, 3, e}) == 0);
  }
}

TEST_CASE("lsh_chunk_attention window mode == the definition (dedup, padding, f64) and the same with 1 and 2 threads") {
  const int64_t B = 2, H = 2, N = 11, D = 3, Dv = 2;
  const Tensor q = uniform({B, H, N, D}, 31, -2, 2), k = uniform({B, H, N, D}, 32, -2, 2), v = uniform({B, H, N, Dv}, 33);
  struct Case {
    int64_t R, w, nb;
    bool dedup;
  };
  for (const Case& cs : {Case{1, 3, 2, false}, Case{2, 4, 2, true}, Case{3, 2, 3, true}, Case{2, 16, 2, true}}) {
    const auto L = make_window_layout(B, H, cs.R, N, cs.w, cs.nb, cs.dedup, 34);
    const auto want = naive(q, k, v, *L, 0.6);
    const Tensor hidden = rows_below(want.second, -std::numeric_limits<double>::infinity());
    const int saved = num_threads();
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      const auto got = lsh_chunk_attention(q, k, v, L, 0.6);
      CHECK(max_abs_diff(got.first, want.first) < 1e-12);
      CHECK(max_abs_diff(masked_fill(got.second, hidden, 0), masked_fill(want.second, hidden, 0)) < 1e-12);
    }
    set_num_threads(saved);
  }
  const auto L = make_window_layout(1, 2, 2, 5, 2, 2, false, 35);
  const Tensor q5 = uniform({1, 2, 5, 3}, 36), v5 = uniform({1, 2, 5, 4}, 37);
  auto bad = std::make_shared<LshChunkLayout>(*L);
  bad->bucket.pop_back();
  CHECK_THROWS_WITH(lsh_chunk_attention(q5, q5, v5, bad, 1.0),
                    "lsh_chunk_attention: a layout of window 2 needs chunks of min(window, N) = 2 (has 2) and 20 "
                    "bucket ids (has 19)");
  bad = std::make_shared<LshChunkLayout>(*L);
  for (int64_t& b : bad->bucket) b = -b;  // the order is no longer sorted by bucket
  CHECK_THROWS_WITH(lsh_chunk_attention(q5, q5, v5, bad, 1.0), doctest::Contains("are not sorted by (bucket, position)"));
}

GRADCHECK("lsh_chunk_attention") {
  const int64_t B = 2, H = 1, N = 7;
  const auto L = make_layout(B, H, 2, N, 3, true, 3, 5, 5);
  const std::vector<Tensor> qkv = {uniform({B, H, N, 3}, 6, -2, 2), uniform({B, H, N, 3}, 7, -2, 2),
                                   uniform({B, H, N, 2}, 8)};
  const Tensor hidden = rows_below(lsh_chunk_attention(qkv[0], qkv[1], qkv[2], L, 0.6).second, -1e4);
  check_gradients(
      [L, hidden](auto x) {
        const auto oz = lsh_chunk_attention(x[0], x[1], x[2], L, 0.6);
        return concat({oz.first, masked_fill(oz.second, hidden, 0)}, 4);
      },
      qkv);
}

TEST_CASE("lsh_chunk_attention: results and gradients do not depend on the thread count (both backward schedules)") {
  const int64_t B = 2, H = 2, N = 50, D = 8, Dv = 5;
  for (int64_t R : {1, 2}) {
    const auto L = make_layout(B, H, R, N, 8, true, 10, 37, 9);
    const Tensor w = uniform({B, H, R, N, Dv + 1}, 10).to(DType::F32);
    const int saved = num_threads();
    std::vector<std::vector<Tensor>> runs;
    for (int threads : {1, 2}) {  // 4 heads: one task per head with 1 thread, per (head, round) with 2
      set_num_threads(threads);
      Tensor q = uniform({B, H, N, D}, 11, -2, 2).to(DType::F32), k = uniform({B, H, N, D}, 12, -2, 2).to(DType::F32);
      Tensor v = uniform({B, H, N, Dv}, 13).to(DType::F32);
      for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
      const auto oz = lsh_chunk_attention(q, k, v, L, 0.35);
      const Tensor hidden = rows_below(oz.second, -1e4);
      sum(mul(concat({oz.first, masked_fill(oz.second, hidden, 0)}, 4), w)).backward();
      runs.push_back({oz.first.detach(), masked_fill(oz.second.detach(), hidden, 0), q.grad(), k.grad(), v.grad()});
    }
    set_num_threads(saved);
    for (size_t t = 0; t < runs[0].size(); ++t) CHECK(max_abs_diff(runs[1][t], runs[0][t]) == 0);
  }
}

TEST_CASE("lsh_chunk_attention: bad shapes and layouts are errors naming the op") {
  const auto L = make_layout(1, 2, 2, 5, 2, false, -1, 5, 14);
  const Tensor q = uniform({1, 2, 5, 3}, 15), v = uniform({1, 2, 5, 4}, 16);
  CHECK_THROWS_WITH(lsh_chunk_attention(q, uniform({1, 2, 6, 3}, 17), uniform({1, 2, 6, 4}, 18), L, 1.0),
                    "lsh_chunk_attention: self-attention only (one position per query and key), got q [1, 2, 5, 3] and "
                    "k [1, 2, 6, 3]");
  CHECK_THROWS_WITH(lsh_chunk_attention(q, q, uniform({1, 2, 4, 4}, 19), L, 1.0),
                    "lsh_chunk_attention: k [1, 2, 5, 3] and v [1, 2, 4, 4] differ in batch, heads or length");
  CHECK_THROWS_WITH(lsh_chunk_attention(q, uniform({1, 2, 5, 2}, 20), v, L, 1.0),
                    "lsh_chunk_attention: q [1, 2, 5, 3] and k [1, 2, 5, 2] differ in batch, heads or head dim");
  const Tensor q4 = uniform({1, 2, 4, 3}, 21), v4 = uniform({1, 2, 4, 4}, 22);
  CHECK_THROWS_WITH(lsh_chunk_attention(q4, q4, v4, L, 1.0),
                    "lsh_chunk_attention: the layout is for [B, H, N] = [1, 2, 5], the input is [1, 2, 4]");
  CHECK_THROWS_WITH(lsh_chunk_attention(q, q, v, nullptr, 1.0), "lsh_chunk_attention: no layout");
  auto bad = std::make_shared<LshChunkLayout>(*L);
  std::swap(bad->order[0], bad->order[1]);
  const std::string swapped = "lsh_chunk_attention: the layout's order and slot are not inverse permutations (slot 0 "
                              "of head-round 0 holds " + std::to_string(L->order[1]) + ")";
  CHECK_THROWS_WITH(lsh_chunk_attention(q, q, v, bad, 1.0), swapped.c_str());
  bad = std::make_shared<LshChunkLayout>(*L);
  bad->nc = 2;
  CHECK_THROWS_WITH(lsh_chunk_attention(q, q, v, bad, 1.0),
                    "lsh_chunk_attention: the layout has 2 rounds and 2 chunks of 2 for 5 positions (needs rounds "
                    ">= 1, chunk >= 1, ceil(N / chunk) chunks)");
}
