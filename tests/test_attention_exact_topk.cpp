// The `exact-topk` variant (models/attention/exact_topk.h): k >= N against full softmax attention, k < N against a
// naive loop (causal and not, padding, query_offset), the tie rule, finite-difference gradients, causal leakage, and
// the errors.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "models/attention/exact_topk.h"
#include "ops/attention_naive.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

std::unique_ptr<ExactTopkAttention> make_topk(int64_t topk) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 4;
  cfg.options.set("topk", std::to_string(topk));
  std::unique_ptr<Attention> a = make_attention("exact-topk", cfg);
  auto* t = dynamic_cast<ExactTopkAttention*>(a.get());
  REQUIRE(t != nullptr);
  a.release();
  return std::unique_ptr<ExactTopkAttention>(t);
}

// Each query's k visible keys of largest logit (ties: the lower index), then softmax over them, by loops.
Tensor naive_topk(const Tensor& q, const Tensor& k, const Tensor& v, int64_t topk, const AttentionMask& m) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Lk = k.size(2), Dv = v.size(3);
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t len = m.key_lengths.empty() ? Lk : m.key_lengths[size_t(b)];
        const int64_t end = std::min(len, m.causal ? i + m.query_offset + 1 : Lk);
        std::vector<double> l(static_cast<size_t>(std::max<int64_t>(end, 0)));
        for (int64_t j = 0; j < end; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += q.at({b, h, i, d}) * k.at({b, h, j, d});
          l[size_t(j)] = s / std::sqrt(double(D));
        }
        std::vector<int64_t> rank(l.size());
        std::iota(rank.begin(), rank.end(), int64_t(0));
        std::stable_sort(rank.begin(), rank.end(), [&](int64_t x, int64_t y) { return l[size_t(x)] > l[size_t(y)]; });
        rank.resize(std::min<size_t>(rank.size(), size_t(topk)));
        double z = 0;
        for (int64_t j : rank) z += std::exp(l[size_t(j)]);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j : rank) acc += std::exp(l[size_t(j)]) / z * v.at({b, h, j, e});
          out.set_at({b, h, i, e}, acc);
        }
      }
  return out;
}

}  // namespace

TEST_CASE("exact-topk: k >= N == full softmax attention (causal and not, padding, cross-attention, f32)") {
  const Tensor q = uniform({2, 2, 6, 4}, 1, -2, 2), k = uniform({2, 2, 9, 4}, 2), v = uniform({2, 2, 9, 3}, 3);
  for (int64_t topk : {9, 32})
    for (bool causal : {false, true})
      for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{5, 0}}) {
        auto attn = make_topk(topk);
        CHECK(attn->name() == "exact-topk");
        AttentionMask m;
        m.causal = causal;
        m.query_offset = causal ? 3 : 0;
        m.key_lengths = lengths;
        const Tensor want = naive_attention(q, k, v, m, 0.5);
        CHECK(max_abs_diff(attn->forward(q, k, v, m), want) < 1e-12);
        CHECK(max_abs_diff(attn->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m), want) < 2e-5);
      }
}

TEST_CASE("exact-topk: k < N == a naive loop (causal and not, padding, query_offset)") {
  const Tensor q = uniform({2, 2, 8, 4}, 11, -2, 2), k = uniform({2, 2, 8, 4}, 12, -2, 2), v = uniform({2, 2, 8, 3}, 13);
  for (int64_t topk : {1, 3})
    for (bool causal : {false, true})
      for (int64_t offset : {0, 2})
        for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{6, 1}}) {
          AttentionMask m;
          m.causal = causal;
          m.query_offset = causal ? offset : 0;
          m.key_lengths = lengths;
          CHECK(max_abs_diff(make_topk(topk)->forward(q, k, v, m), naive_topk(q, k, v, topk, m)) < 1e-12);
        }
}

TEST_CASE("exact-topk: equal logits keep the lower key index; the chosen keys are largest first") {
  // keys 1, 3 and 4 are equal and largest, key 0 next: k = 2 takes keys 1 and 3
  Tensor k = zeros({1, 1, 6, 2}, DType::F64);
  const std::vector<double> key_rows{0.5, 0, 1, 0, -1, 0, 1, 0, 1, 0, 0, 0};
  for (int64_t j = 0; j < 6; ++j)
    for (int64_t d = 0; d < 2; ++d) k.set_at({0, 0, j, d}, key_rows[size_t(j * 2 + d)]);
  const Tensor q = from_vector(std::vector<double>{2, 1}, {1, 1, 1, 2}, DType::F64);
  auto attn = make_topk(2);
  const Tensor sel = attn->selected(q, k, {});
  CHECK(sel.shape() == Shape{1, 1, 1, 2});
  CHECK(sel.at({0, 0, 0, 0}) == 1);
  CHECK(sel.at({0, 0, 0, 1}) == 3);
  CHECK(make_topk(4)->selected(q, k, {}).to_vector() == std::vector<double>{1, 3, 4, 0});
  AttentionMask m;  // fewer visible keys than k: empty slots are -1
  m.key_lengths = {2};
  CHECK(make_topk(4)->selected(q, k, m).to_vector() == std::vector<double>{1, 0, -1, -1});
  std::vector<int64_t> out(3);
  const std::vector<double> scores{1, 2, 2, 0};
  top_keys(scores.data(), 4, 3, out.data());
  CHECK(out == std::vector<int64_t>{1, 2, 0});
}

TEST_CASE("exact-topk: finite-difference gradients of q, k, v (f64), causal and not, padding") {
  const std::vector<Tensor> qkv{uniform({2, 2, 6, 3}, 21, -2, 2), uniform({2, 2, 6, 3}, 22, -2, 2),
                                uniform({2, 2, 6, 2}, 23)};
  for (bool causal : {false, true}) {
    AttentionMask m;
    m.causal = causal;
    m.key_lengths = {4, 0};
    auto attn = make_topk(2);
    Attention* a = attn.get();
    check_gradients([a, m](auto x) { return a->forward(x[0], x[1], x[2], m); }, qkv);
  }
}

TEST_CASE("exact-topk causal: no gradient reaches later positions, and later keys and values move no output") {
  const int64_t N = 7;
  const Tensor q0 = uniform({1, 2, N, 4}, 31, -2, 2), k0 = uniform({1, 2, N, 4}, 32, -2, 2);
  const Tensor v0 = uniform({1, 2, N, 3}, 33);
  AttentionMask m;
  m.causal = true;
  auto attn = make_topk(2);
  const Tensor ref = attn->forward(q0, k0, v0, m);
  for (int64_t i = 0; i < N; ++i) {
    Tensor q = q0.clone(), k = k0.clone(), v = v0.clone();
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    const Tensor yi = narrow(attn->forward(q, k, v, m), 2, i, 1);
    yi.backward(uniform(yi.shape(), 34 + uint64_t(i)));
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t j = i + 1; j < N; ++j)
        for (int64_t d = 0; d < 4; ++d) {
          CHECK(q.grad().at({0, h, j, d}) == 0);
          CHECK(k.grad().at({0, h, j, d}) == 0);
          if (d < 3) CHECK(v.grad().at({0, h, j, d}) == 0);
        }
    Tensor k2 = k0.clone(), v2 = v0.clone();
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t j = i + 1; j < N; ++j)
        for (int64_t d = 0; d < 4; ++d) {
          k2.set_at({0, h, j, d}, 1e3);
          if (d < 3) v2.set_at({0, h, j, d}, -1e3);
        }
    CHECK(max_abs_diff(narrow(attn->forward(q0, k2, v2, m), 2, 0, i + 1), narrow(ref, 2, 0, i + 1)) == 0);
  }
}

TEST_CASE("exact-topk: bad options, refused masks and bad shapes") {
  AttentionConfig cfg;
  cfg.options.set("topk", "0");
  CHECK_THROWS_WITH(make_attention("exact-topk", cfg), "attention 'exact-topk': option topk expects an integer >= 1, "
                                                       "got '0'");
  AttentionConfig opt;
  opt.options.set("clusters", "4");
  CHECK_THROWS_WITH(make_attention("exact-topk", opt), "attention 'exact-topk': unknown option 'clusters'");
  AttentionConfig causal_cfg;
  causal_cfg.causal = true;
  CHECK(dynamic_cast<ExactTopkAttention*>(make_attention("exact-topk", causal_cfg).get())->topk() == 32);

  auto attn = make_topk(2);
  const Tensor q = uniform({1, 2, 4, 4}, 41), k = uniform({1, 2, 5, 4}, 42), v = uniform({1, 2, 5, 3}, 43);
  const std::string refused = "attention 'exact-topk': does not take ", why =
      " (the top k keys are chosen on plain logits); it takes: causal, non-causal, key padding, query offset, "
      "cross-attention";
  AttentionMask keep;
  keep.keep = ones({4, 5});
  CHECK_THROWS_WITH(attn->forward(q, k, v, keep), (refused + "a keep mask" + why).c_str());
  AttentionMask bias;
  bias.bias = zeros({4, 5}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, k, v, bias), (refused + "a bias" + why).c_str());
  AttentionMask alibi;
  alibi.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, k, v, alibi), (refused + "ALiBi slopes" + why).c_str());
  AttentionMask lengths;
  lengths.key_lengths = {6};
  CHECK_THROWS_WITH(attn->forward(q, k, v, lengths), "attention 'exact-topk': key_lengths[0] = 6 is outside [0, 5]");
  CHECK_THROWS(attn->forward(q, k, uniform({1, 2, 4, 3}, 44), {}));
  CHECK(attn->forward(q, narrow(k, 2, 0, 0), narrow(v, 2, 0, 0), {}).shape() == Shape{1, 2, 4, 3});
  CHECK_THROWS_WITH(attn->step(q, k, v, *attn->new_state(), {}),  // its step: tests/test_attention_recurrent_forms.cpp
                    doctest::Contains("attention 'exact-topk' step: q, k and v must be one position [B, H, 1, D]"));
}
