// The `memory-compressed` variant (models/attention/memory_compressed.h) against full attention when nothing is
// compressed, a naive loop of the strided convolution and softmax, its gradients, causal leakage and padding.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "models/attention/memory_compressed.h"
#include "ops/attention_naive.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::uniform;

namespace {

std::unique_ptr<Attention> make_mc(int64_t c, bool causal = false, int64_t heads = 2, int64_t dim = 3) {
  AttentionConfig cfg;
  cfg.heads = heads, cfg.head_dim = dim, cfg.causal = causal;
  cfg.options.set("compress", std::to_string(c));
  auto a = make_attention("memory-compressed", cfg);
  a->to(DType::F64);
  return a;
}

void set_weights(Attention& a, uint64_t seed) {
  for (auto& [name, p] : a.named_parameters()) p.copy_from(uniform(p.shape(), seed++, -0.7, 0.7));
}

Tensor param(const Attention& a, const std::string& name) {
  for (auto& [n, p] : a.named_parameters())
    if (n == name) return p;
  return {};
}

// The definition by loops in double: slots b hold Σ_r x_{bc+r} W_{h,r} over real (unpadded, in-range) rows,
// query i sees slot b when b < ceil(length / c) and, causal, when bc + c − 1 <= i; softmax with 1/√D.
Tensor naive_mc(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& wk, const Tensor& wv, int64_t c,
                bool causal, const std::vector<int64_t>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), N = k.size(2), Dv = v.size(3);
  const int64_t M = (N + c - 1) / c;
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t len = lengths.empty() ? N : lengths[size_t(b)];
      std::vector<double> ks(size_t(M * D), 0.0), vs(size_t(M * Dv), 0.0);
      for (int64_t s = 0; s < M; ++s)
        for (int64_t r = 0; r < c; ++r) {
          const int64_t j = s * c + r;
          if (j >= N || j >= len) continue;
          for (int64_t e = 0; e < D; ++e)
            for (int64_t d = 0; d < D; ++d) ks[size_t(s * D + e)] += k.at({b, h, j, d}) * wk.at({h, r * D + d, e});
          for (int64_t e = 0; e < Dv; ++e)
            for (int64_t d = 0; d < Dv; ++d) vs[size_t(s * Dv + e)] += v.at({b, h, j, d}) * wv.at({h, r * Dv + d, e});
        }
      for (int64_t i = 0; i < Lq; ++i) {
        std::vector<double> logit;
        std::vector<int64_t> seen;
        for (int64_t s = 0; s < (len + c - 1) / c; ++s) {
          if (causal && s * c + c - 1 > i) continue;
          double x = 0;
          for (int64_t d = 0; d < D; ++d) x += q.at({b, h, i, d}) * ks[size_t(s * D + d)];
          logit.push_back(x / std::sqrt(double(D)));
          seen.push_back(s);
        }
        if (seen.empty()) continue;
        double mx = -std::numeric_limits<double>::infinity(), z = 0;
        for (double x : logit) mx = std::max(mx, x);
        for (double x : logit) z += std::exp(x - mx);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (size_t n = 0; n < seen.size(); ++n) acc += std::exp(logit[n] - mx) / z * vs[size_t(seen[n] * Dv + e)];
          out.set_at({b, h, i, e}, acc);
        }
      }
    }
  return out;
}

}  // namespace

TEST_CASE("memory-compressed with compress=1 and its initial identity weights == full softmax attention") {
  const Tensor q = uniform({2, 2, 7, 3}, 1), k = uniform({2, 2, 7, 3}, 2), v = uniform({2, 2, 7, 3}, 3);
  auto a = make_mc(1);
  CHECK(a->name() == "memory-compressed");
  for (bool causal : {false, true}) {
    AttentionMask m;
    m.causal = causal;
    m.key_lengths = {5, 7};
    CHECK(eng::test::max_abs_diff(a->forward(q, k, v, m), naive_attention(q, k, v, m, 1 / std::sqrt(3.0))) < 1e-13);
  }
}

TEST_CASE("memory-compressed == a loop of the strided convolution and softmax (c = 3, N not a multiple)") {
  const Tensor q = uniform({2, 2, 10, 3}, 4), k = uniform({2, 2, 10, 3}, 5), v = uniform({2, 2, 10, 3}, 6);
  for (bool causal : {false, true})
    for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{4, 10}}) {
      auto a = make_mc(3, causal);
      set_weights(*a, 7);
      AttentionMask m;
      m.key_lengths = lengths;
      const Tensor want = naive_mc(q, k, v, param(*a, "wk"), param(*a, "wv"), 3, causal, lengths);
      CHECK(eng::test::max_abs_diff(a->forward(q, k, v, m), want) < 1e-13);
      const Tensor y32 = a->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m);
      CHECK(y32.dtype() == DType::F32);
      CHECK(eng::test::max_abs_diff(y32, want) < 1e-5);
    }
  // cross-attention (non-causal): more queries than keys
  auto a = make_mc(2);
  const Tensor q2 = uniform({1, 2, 9, 3}, 8);
  CHECK(eng::test::max_abs_diff(a->forward(q2, narrow(k, 0, 0, 1), narrow(v, 0, 0, 1), {}),
                                naive_mc(q2, narrow(k, 0, 0, 1), narrow(v, 0, 0, 1), param(*a, "wk"), param(*a, "wv"), 2,
                                         false, {})) < 1e-13);
}

TEST_CASE("memory-compressed, causal: no output sees a position after it; early queries give zeros") {
  auto a = make_mc(3, true);
  set_weights(*a, 9);
  const int64_t N = 8;
  Tensor q = uniform({1, 2, N, 3}, 10).set_requires_grad(), k = uniform({1, 2, N, 3}, 11).set_requires_grad(),
         v = uniform({1, 2, N, 3}, 12).set_requires_grad();
  const Tensor y = a->forward(q, k, v, {});
  for (int64_t i = 0; i < 2; ++i)
    for (double x : narrow(y, 2, i, 1).to_vector()) CHECK(x == 0);
  for (int64_t i = 0; i < N; ++i) {
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    sum(narrow(a->forward(q, k, v, {}), 2, i, 1)).backward();
    for (const Tensor& t : {q, k, v})
      for (int64_t j = i + 1; j < N; ++j)
        for (double g : narrow(t.grad(), 2, j, 1).to_vector()) CHECK(g == 0);
  }
}

TEST_CASE("memory-compressed: finite-difference gradients of q, k, v and the convolution weights") {
  for (bool causal : {false, true}) {
    auto a = make_mc(2, causal);
    set_weights(*a, 13);
    Attention* p = a.get();
    AttentionMask m;
    m.key_lengths = {5, 3};
    eng::test::check_gradients([p, m](auto x) { return p->forward(x[0], x[1], x[2], m); },
                               {uniform({2, 2, 5, 3}, 14), uniform({2, 2, 5, 3}, 15), uniform({2, 2, 5, 3}, 16)});
    const Tensor q = uniform({2, 2, 5, 3}, 17), k = uniform({2, 2, 5, 3}, 18), v = uniform({2, 2, 5, 3}, 19);
    eng::test::check_parameter_gradients(a->named_parameters(), [&] { return p->forward(q, k, v, m); });
  }
}

TEST_CASE("memory-compressed: bad options, shapes and masks are refused") {
  AttentionConfig cfg;
  cfg.options.set("compress", "0");
  CHECK_THROWS_WITH(make_attention("memory-compressed", cfg),
                    "attention 'memory-compressed': option compress expects an integer >= 1, got '0'");
  auto a = make_mc(2);
  const Tensor q = uniform({1, 2, 4, 3}, 20), k = uniform({1, 2, 4, 3}, 21), v = uniform({1, 2, 4, 3}, 22);
  AttentionMask bias;
  bias.bias = zeros({4, 4}, DType::F64);
  const std::string why = "keep, bias and ALiBi index keys that the convolution replaces by compressed slots, and "
                          "causal queries start at position 0";
  CHECK_THROWS_WITH(a->forward(q, k, v, bias), ("attention 'memory-compressed': does not take a bias (" + why +
                                                "); it takes: causal, non-causal, key padding, cross-attention")
                                                   .c_str());
  CHECK_THROWS_WITH(a->forward(uniform({1, 2, 4, 5}, 23), uniform({1, 2, 4, 5}, 24), uniform({1, 2, 4, 5}, 25), {}),
                    "attention 'memory-compressed': built for 2 heads of dim 3, got q [1, 2, 4, 5] and v [1, 2, 4, 5]");
  AttentionMask causal;
  causal.causal = true;
  CHECK_THROWS_WITH(a->forward(uniform({1, 2, 3, 3}, 26), k, v, causal),
                    ("attention 'memory-compressed': does not take causal queries that continue a sequence "
                     "(query_offset 0, 3 queries, 4 keys; step() continues one) (" + why +
                     "); it takes: causal, non-causal, key padding, cross-attention").c_str());
  // A causal model is causal under a non-causal mask too: no cross-attention, and queries from position 0.
  auto built_causal = make_mc(2, true);
  CHECK_THROWS_WITH(built_causal->forward(uniform({1, 2, 3, 3}, 27), k, v, {}),
                    doctest::Contains("attention 'memory-compressed': does not take cross-attention (3 queries, 4 "
                                      "keys) (built causal, it is causal under any mask;"));
  AttentionMask late;
  late.query_offset = 1;
  CHECK_THROWS_WITH(built_causal->forward(q, k, v, late), "attention 'memory-compressed': causal masking needs its "
                                                          "queries from position 0, got query_offset 1");
  CHECK(a->new_state() != nullptr);  // its step: tests/test_attention_recurrent_forms.cpp
}
