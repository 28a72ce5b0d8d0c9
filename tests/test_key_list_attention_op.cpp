// key_list_attention (ops/key_list_attention.h): against softmax over each query's list by loops (empty slots, a
// bias, a query with no key, f64 and f32), finite-difference gradients, the same results with 1 and 2 threads, and
// the errors.
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "engine/rng.h"
#include "engine/threadpool.h"
#include "ops/binary.h"
#include "ops/key_list_attention.h"
#include "ops/reduce.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

// Lists of kk slots per query of [B, H, Lq] over Lk keys: random keys, about one slot in four empty, query 2 of
// head 0 with no key at all; with `bias`, a random bias per slot.
std::shared_ptr<KeyLists> make_lists(int64_t BH, int64_t Lq, int64_t Lk, int64_t kk, bool bias, uint64_t seed) {
  auto L = std::make_shared<KeyLists>();
  L->kk = kk;
  Rng rng(seed);
  for (int64_t n = 0; n < BH * Lq * kk; ++n) {
    const bool empty = rng.below(4) == 0 || n / kk == 2;
    L->keys.push_back(empty ? -1 : int64_t(rng.below(uint64_t(Lk))));
    if (bias) L->bias.push_back(rng.normal());
  }
  return L;
}

Tensor naive(const Tensor& q, const Tensor& k, const Tensor& v, const KeyLists& L, double scale) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Dv = v.size(3);
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        std::vector<std::pair<int64_t, double>> keys;
        for (int64_t s = 0; s < L.kk; ++s) {
          const size_t at = size_t(((b * H + h) * Lq + i) * L.kk + s);
          const int64_t j = L.keys[at];
          if (j < 0) continue;
          double l = 0;
          for (int64_t d = 0; d < D; ++d) l += q.at({b, h, i, d}) * k.at({b, h, j, d});
          keys.push_back({j, l * scale + (L.bias.empty() ? 0.0 : L.bias[at])});
        }
        double m = -std::numeric_limits<double>::infinity(), z = 0;
        for (const auto& kv : keys) m = std::max(m, kv.second);
        for (const auto& kv : keys) z += std::exp(kv.second - m);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (const auto& kv : keys) acc += std::exp(kv.second - m) / z * v.at({b, h, kv.first, e});
          out.set_at({b, h, i, e}, acc);
        }
      }
  return out;
}

}  // namespace

TEST_CASE("key_list_attention == softmax over each list by loops (empty slots, bias, no key, f64 and f32)") {
  const int64_t B = 2, H = 2, Lq = 6, Lk = 9;
  const Tensor q = uniform({B, H, Lq, 3}, 1, -2, 2), k = uniform({B, H, Lk, 3}, 2, -2, 2), v = uniform({B, H, Lk, 4}, 3);
  for (bool bias : {false, true}) {
    const auto L = make_lists(B * H, Lq, Lk, 5, bias, 4);
    const Tensor want = naive(q, k, v, *L, 0.7);
    CHECK(max_abs_diff(key_list_attention(q, k, v, L, 0.7), want) < 1e-12);
    const Tensor y32 = key_list_attention(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), L, 0.7);
    CHECK(y32.dtype() == DType::F32);
    CHECK(max_abs_diff(y32, want) < 2e-6);
    for (int64_t e = 0; e < 4; ++e) CHECK(want.at({0, 0, 2, e}) == 0);  // the query with no key
  }
}

GRADCHECK("key_list_attention") {
  const auto L = make_lists(2, 5, 6, 4, true, 5);
  check_gradients([L](auto x) { return key_list_attention(x[0], x[1], x[2], L, 0.8); },
                  {uniform({1, 2, 5, 3}, 6, -2, 2), uniform({1, 2, 6, 3}, 7, -2, 2), uniform({1, 2, 6, 2}, 8)});
}

TEST_CASE("key_list_attention: results and gradients are the same with 1 and 2 threads") {
  const auto L = make_lists(4, 20, 30, 6, true, 9);
  const Tensor w = uniform({2, 2, 20, 5}, 10).to(DType::F32);
  const int saved = num_threads();
  std::vector<std::vector<Tensor>> runs;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Tensor q = uniform({2, 2, 20, 8}, 11, -2, 2).to(DType::F32), k = uniform({2, 2, 30, 8}, 12, -2, 2).to(DType::F32);
    Tensor v = uniform({2, 2, 30, 5}, 13).to(DType::F32);
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    const Tensor y = key_list_attention(q, k, v, L, 0.35);
    sum(mul(y, w)).backward();
    runs.push_back({y.detach(), q.grad(), k.grad(), v.grad()});
  }
  set_num_threads(saved);
  for (size_t t = 0; t < runs[0].size(); ++t) CHECK(max_abs_diff(runs[1][t], runs[0][t]) == 0);
}

TEST_CASE("key_list_attention: bad lists and shapes are errors naming the op") {
  const Tensor q = uniform({1, 1, 2, 3}, 14), k = uniform({1, 1, 4, 3}, 15), v = uniform({1, 1, 4, 2}, 16);
  auto L = std::make_shared<KeyLists>();
  L->kk = 2;
  L->keys = {0, 1, 2};
  CHECK_THROWS_WITH(key_list_attention(q, k, v, L, 1.0), "key_list_attention: the lists hold 3 keys and 0 biases, 4 "
                                                         "expected (2 per query of q [1, 1, 2, 3])");
  L->keys = {0, 1, 2, 4};
  CHECK_THROWS_WITH(key_list_attention(q, k, v, L, 1.0),
                    "key_list_attention: a list names key 4, outside [0, 4) (−1: an empty slot)");
  CHECK_THROWS_WITH(key_list_attention(q, k, v, nullptr, 1.0), "key_list_attention: no key lists");
  L->keys = {0, 1, 2, 3};
  CHECK(key_list_attention(q, k, v, L, 1.0).shape() == Shape{1, 1, 2, 2});
}
