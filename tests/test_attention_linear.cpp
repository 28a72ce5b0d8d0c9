// The `linear` variant against the quadratic form sim(Q_i, K_j) = φ(Q_i)ᵀφ(K_j) materialised with an
// explicit mask, for every feature map; its options, refusals and the cross-attention memory digest.
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "models/attention/linear.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::uniform;

namespace {

std::unique_ptr<Attention> make_linear(const std::string& feature_map, const std::string& name = "linear") {
  AttentionConfig c;
  c.options.set("feature_map", feature_map);
  return make_attention(name, c);
}

// out_i = Σ_j keep_ij φ(q_i)·φ(k_j) v_j / (Σ_j keep_ij φ(q_i)·φ(k_j) + eps), with eps = 1e-6.
Tensor quadratic(const FeatureMap& phi, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                 const std::vector<int64_t>& key_lengths) {
  const int64_t B = q.size(0), N = q.size(2), L = k.size(2);
  std::vector<double> keep(size_t(B * N * L), 1.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < L; ++j)
        if ((causal && j > i) || (!key_lengths.empty() && j >= key_lengths[size_t(b)])) keep[size_t((b * N + i) * L + j)] = 0;
  Tensor sim = mul(matmul(phi.features(q), transpose(phi.features(k), 2, 3)), from_vector(keep, {B, 1, N, L}, q.dtype()));
  return div(matmul(sim, v), add_scalar(sum(sim, {3}, true), 1e-6));
}

}  // namespace

TEST_CASE("linear == the materialised quadratic form for every feature map, causal or not, with padding; gradients too") {
  for (const std::string fm : {"elu", "relu", "poly2"})
    for (bool causal : {false, true}) {
      CAPTURE(fm);
      CAPTURE(causal);
      auto attn = make_linear(fm);
      AttentionMask mask;
      mask.causal = causal;
      if (!causal) mask.key_lengths = {70, 40};
      std::vector<Tensor> x = {uniform({2, 2, 70, 3}, 1), uniform({2, 2, 70, 3}, 2), uniform({2, 2, 70, 2}, 3)};
      Tensor w = uniform({2, 2, 70, 2}, 4);
      std::vector<Tensor> got, want;
      for (int pass = 0; pass < 2; ++pass) {
        std::vector<Tensor> l;
        for (const Tensor& t : x) l.push_back(t.clone().detach().set_requires_grad(true));
        Tensor y = pass == 0 ? attn->forward(l[0], l[1], l[2], mask)
                             : quadratic(dynamic_cast<LinearAttention&>(*attn).feature_map(), l[0], l[1], l[2], causal,
                                         mask.key_lengths);
        sum(mul(y, w)).backward();
        (pass == 0 ? got : want) = {y.detach(), l[0].grad(), l[1].grad(), l[2].grad()};
      }
      for (size_t i = 0; i < got.size(); ++i) CHECK(eng::test::allclose(got[i], want[i], 1e-9, 1e-11));
    }
}

TEST_CASE("poly2 is the exact feature map of (1 + qᵀk)²") {
  auto phi = make_feature_map("poly2");
  Tensor q = uniform({1, 1, 3, 4}, 1), k = uniform({1, 1, 5, 4}, 2);
  CHECK(phi->dim(4) == 21);
  Tensor want = pow_scalar(add_scalar(matmul(q, transpose(k, 2, 3)), 1.0), 2.0);
  CHECK(eng::test::allclose(matmul(phi->features(q), transpose(phi->features(k), 2, 3)), want, 1e-12, 1e-12));
}

TEST_CASE("linear: padded keys set to 1e9 do not move the output") {
  auto attn = make_linear("elu");
  AttentionMask mask;
  mask.key_lengths = {3, 6};
  Tensor q = uniform({2, 2, 4, 3}, 1), k = uniform({2, 2, 6, 3}, 2), v = uniform({2, 2, 6, 2}, 3);
  Tensor y = attn->forward(q, k, v, mask);
  Tensor k2 = k.clone(), v2 = v.clone();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 3; j < 6; ++j) {
      for (int64_t m = 0; m < 3; ++m) k2.data<double>()[(h * 6 + j) * 3 + m] = 1e9;
      for (int64_t m = 0; m < 2; ++m) v2.data<double>()[(h * 6 + j) * 2 + m] = 1e9;
    }
  CHECK(eng::test::max_abs_diff(attn->forward(q, k2, v2, mask), y) == 0.0);
}

TEST_CASE("linear: options and refusals are clear") {
  AttentionConfig c;
  c.options.set("feature_map", "cosine");
  CHECK_THROWS_WITH(make_attention("linear", c), doctest::Contains("unknown feature map 'cosine' (known: elu, poly2, relu"));
  AttentionConfig d;
  d.options.set("eps", "-1");
  CHECK_THROWS_WITH(make_attention("linear", d), doctest::Contains("attention 'linear': option eps expects a finite "
                                                                   "number >= 0, got '-1'"));
  AttentionConfig e;
  e.options.set("impl", "flash");
  CHECK_THROWS_WITH(make_attention("linear", e), doctest::Contains("impl"));
  auto attn = make_linear("elu");
  Tensor q = uniform({1, 1, 3, 2}, 1);
  AttentionMask bias;
  bias.bias = zeros({1, 1, 3, 3}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, q, q, bias),
                    "attention 'linear': does not take a bias (it forms no (query, key) logits, and its causal sums "
                    "start at position 0); it takes: causal, non-causal, key padding, cross-attention");
  AttentionMask offset;
  offset.causal = true;
  offset.query_offset = 2;
  CHECK_THROWS_WITH(attn->forward(q, q, q, offset), doctest::Contains("query_offset 2"));
  // causal-linear is causal under a non-causal mask too, so it refuses what its causal form cannot do there as well.
  auto causal = make_linear("elu", "causal-linear");
  AttentionMask late;
  late.query_offset = 1;
  CHECK_THROWS_WITH(causal->forward(q, q, q, late), "attention 'causal-linear': the causal parallel form needs its "
                                                    "queries from position 0, got query_offset 1 (use step() to "
                                                    "continue a sequence)");
  Tensor k4 = uniform({1, 1, 4, 2}, 2);
  CHECK_THROWS_WITH(causal->forward(q, k4, k4, {}),
                    doctest::Contains("does not take cross-attention (3 queries, 4 keys)"));
}

TEST_CASE("linear: the cross-attention memory digest == forward over the memory") {
  auto attn = make_linear("elu");
  AttentionMask mask;
  mask.key_lengths = {5, 2};
  Tensor k = uniform({2, 3, 5, 4}, 1), v = uniform({2, 3, 5, 2}, 2), q = uniform({2, 3, 3, 4}, 3);
  auto digest = attn->memory_state(k, v, mask);
  REQUIRE(digest != nullptr);
  CHECK(eng::test::allclose(attn->attend_state(q, *digest), attn->forward(q, k, v, mask), 1e-12, 1e-13));
  // The digest refuses what forward refuses, in the same words.
  AttentionMask keep;
  keep.keep = ones({1, 5});
  CHECK_THROWS_WITH(attn->memory_state(k, v, keep), doctest::Contains("attention 'linear' memory: does not take a keep "
                                                                      "mask (it forms no (query, key) logits"));
  AttentionMask causal;
  causal.causal = true;
  CHECK_THROWS_WITH(attn->memory_state(k, v, causal),
                    "attention 'linear' memory: cross-attention over a memory is not causal");
}
