// The `improved-clustered` and `causal-improved-clustered` variants (models/attention/improved_clustered.h): top-k
// >= N against full softmax attention, top-k < N against a naive reading of the definitions on the same cluster ids
// (causal: row i on the clusters of queries 0 … i), finite-difference gradients, causal leakage, and the errors.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <vector>

#include "models/attention/improved_clustered.h"
#include "ops/attention_naive.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

using Opts = std::map<std::string, std::string>;

std::unique_ptr<ImprovedClusteredAttention> make_improved(const std::string& name, const Opts& opts,
                                                          bool causal = false) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 4, cfg.seed = 9, cfg.causal = causal;
  cfg.options = AttentionOptions(opts);
  std::unique_ptr<Attention> a = make_attention(name, cfg);
  auto* c = dynamic_cast<ImprovedClusteredAttention*>(a.get());
  REQUIRE(c != nullptr);
  a.release();
  return std::unique_ptr<ImprovedClusteredAttention>(c);
}

double dot(const Tensor& a, const std::vector<double>& x, int64_t b, int64_t h, int64_t j) {
  double s = 0;
  for (size_t d = 0; d < x.size(); ++d) s += x[d] * a.at({b, h, j, int64_t(d)});
  return s / std::sqrt(double(x.size()));
}

// Both definitions by loops on given ids [B, H, Lq]. The centroid c of query i's cluster ranks the keys j < length by
// c·k_j (ties: the lower index). improved (causal = false here): T = the first k of that ranking, m̂ = Σ_T A^c, and
// out_i = m̂ Σ_T softmax_T(q_i·k_j) v_j + Σ_{j ∉ T} A^c_j v_j. causal_form: T_i = the first k of the ranking with
// j < end_i (the causal bound), out_i = Σ_{T_i} softmax_{T_i}(q_i·k_j) v_j.
Tensor naive_improved(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& ids, int64_t topk,
                      const AttentionMask& m, bool causal_form) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Lk = k.size(2), Dv = v.size(3);
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        std::vector<double> c(static_cast<size_t>(D), 0.0), qi(static_cast<size_t>(D));
        double n = 0;
        for (int64_t r = 0; r < Lq; ++r)
          if (ids.at({b, h, r}) == ids.at({b, h, i})) {
            n += 1;
            for (int64_t d = 0; d < D; ++d) c[size_t(d)] += q.at({b, h, r, d});
          }
        for (int64_t d = 0; d < D; ++d) c[size_t(d)] /= n, qi[size_t(d)] = q.at({b, h, i, d});
        const int64_t len = m.key_lengths.empty() ? Lk : m.key_lengths[size_t(b)];
        const int64_t end = std::min(len, m.causal ? i + m.query_offset + 1 : Lk);
        std::vector<double> lc(static_cast<size_t>(len)), ac(static_cast<size_t>(len));
        for (int64_t j = 0; j < len; ++j) lc[size_t(j)] = dot(k, c, b, h, j);
        std::vector<int64_t> rank(static_cast<size_t>(len));
        std::iota(rank.begin(), rank.end(), int64_t(0));
        std::stable_sort(rank.begin(), rank.end(), [&](int64_t x, int64_t y) { return lc[size_t(x)] > lc[size_t(y)]; });
        std::vector<int64_t> top;
        for (int64_t j : rank)
          if (int64_t(top.size()) < topk && (!causal_form || j < end)) top.push_back(j);
        double zc = 0, mass = 1, zt = 0;
        for (int64_t j = 0; j < len; ++j) zc += (ac[size_t(j)] = std::exp(lc[size_t(j)]));
        std::vector<double> w(static_cast<size_t>(Lk), 0.0);
        if (!causal_form) {
          mass = 0;
          for (int64_t j = 0; j < len; ++j) w[size_t(j)] = ac[size_t(j)] / zc;
          for (int64_t j : top) mass += w[size_t(j)], w[size_t(j)] = 0;
        }
        for (int64_t j : top) zt += std::exp(dot(k, qi, b, h, j));
        for (int64_t j : top) w[size_t(j)] = mass * std::exp(dot(k, qi, b, h, j)) / zt;
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < Lk; ++j) acc += w[size_t(j)] * v.at({b, h, j, e});
          out.set_at({b, h, i, e}, acc);
        }
      }
  return out;
}

}  // namespace

TEST_CASE("improved-clustered: topk >= N == full softmax attention, whatever the clusters (padding, f32)") {
  const Tensor q = uniform({2, 2, 9, 4}, 1, -2, 2), k = uniform({2, 2, 7, 4}, 2), v = uniform({2, 2, 7, 3}, 3);
  for (const char* topk : {"7", "100"})
    for (const char* clusters : {"1", "3"})
      for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{4, 0}}) {
        auto attn = make_improved("improved-clustered", {{"topk", topk}, {"clusters", clusters}});
        CHECK(attn->name() == "improved-clustered");
        AttentionMask m;
        m.key_lengths = lengths;
        const Tensor want = naive_attention(q, k, v, m, 0.5);
        CHECK(max_abs_diff(attn->forward(q, k, v, m), want) < 1e-12);
        CHECK(max_abs_diff(attn->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m), want) < 2e-5);
      }
}

TEST_CASE("causal-improved-clustered: topk >= N == full causal softmax attention (padding, query_offset)") {
  const Tensor q = uniform({2, 2, 9, 4}, 4, -2, 2), k = uniform({2, 2, 9, 4}, 5), v = uniform({2, 2, 9, 3}, 6);
  for (const char* clusters : {"1", "4"})
    for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{6, 0}}) {
      auto attn = make_improved("causal-improved-clustered", {{"topk", "9"}, {"clusters", clusters}}, true);
      CHECK(attn->name() == "causal-improved-clustered");
      AttentionMask m;
      m.causal = true;
      m.key_lengths = lengths;
      CHECK(max_abs_diff(attn->forward(q, k, v, m), naive_attention(q, k, v, m, 0.5)) < 1e-12);
      m.query_offset = 5;  // the last 4 queries of a cache of 9 keys
      const Tensor q4 = narrow(q, 2, 5, 4);
      CHECK(max_abs_diff(attn->forward(q4, k, v, m), naive_attention(q4, k, v, m, 0.5)) < 1e-12);
    }
}

TEST_CASE("improved-clustered and its causal form: topk < N == the definitions on the same cluster ids") {
  const Tensor q = uniform({2, 2, 10, 4}, 11, -2, 2), k = uniform({2, 2, 10, 4}, 12, -2, 2);
  const Tensor v = uniform({2, 2, 10, 3}, 13);
  for (const char* topk : {"1", "3"})
    for (const char* clusters : {"1", "3"})
      for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{7, 2}}) {
        AttentionMask m;
        m.key_lengths = lengths;
        auto attn = make_improved("improved-clustered", {{"topk", topk}, {"clusters", clusters}, {"bits", "8"}});
        int64_t call = attn->call();
        Tensor y = attn->forward(q, k, v, m);
        CHECK(max_abs_diff(y, naive_improved(q, k, v, attn->clusters(q, call), std::stoll(topk), m, false)) < 1e-12);
        for (bool causal : {false, true}) {
          m.causal = causal;
          auto cattn = make_improved("causal-improved-clustered", {{"topk", topk}, {"clusters", clusters}});
          call = cattn->call();
          y = cattn->forward(q, k, v, m);
          if (!causal) {
            CHECK(max_abs_diff(y, naive_improved(q, k, v, cattn->clusters(q, call), std::stoll(topk), m, true)) < 1e-12);
            continue;
          }
          for (int64_t i = 0; i < 10; ++i) {  // causal: row i is the last row of the definition on queries 0 … i
            const Tensor qi = narrow(q, 2, 0, i + 1);
            const Tensor want = naive_improved(qi, k, v, cattn->clusters(qi, call), std::stoll(topk), m, true);
            CHECK(max_abs_diff(narrow(y, 2, i, 1), narrow(want, 2, i, 1)) < 1e-12);
          }
        }
      }
}

TEST_CASE("improved-clustered and its causal form: finite-difference gradients of q, k and v (f64, fixed clusters)") {
  const std::vector<Tensor> qkv{uniform({2, 1, 6, 3}, 21, -2, 2), uniform({2, 1, 7, 3}, 22, -2, 2),
                                uniform({2, 1, 7, 2}, 23)};
  AttentionMask m;
  m.key_lengths = {5, 7};
  auto attn = make_improved("improved-clustered", {{"topk", "2"}, {"clusters", "3"}, {"redraw", "fixed"}});
  Attention* a = attn.get();
  check_gradients([a, m](auto x) { return a->forward(x[0], x[1], x[2], m); }, qkv);
  m.causal = true;
  auto cattn = make_improved("causal-improved-clustered", {{"topk", "2"}, {"clusters", "3"}, {"redraw", "fixed"}});
  Attention* c = cattn.get();
  check_gradients([c, m](auto x) { return c->forward(x[0], x[1], x[2], m); }, qkv);
}

TEST_CASE("causal-improved-clustered: no gradient reaches later positions; later q, k and v move no output") {
  const int64_t N = 8;
  const Tensor q0 = uniform({2, 2, N, 4}, 31, -2, 2), k0 = uniform({2, 2, N, 4}, 32, -2, 2);
  const Tensor v0 = uniform({2, 2, N, 3}, 33);
  AttentionMask m;
  m.causal = true;
  m.key_lengths = {6, 8};
  auto attn = make_improved("causal-improved-clustered", {{"topk", "2"}, {"clusters", "3"}}, true);
  const int64_t call = attn->call();
  for (int64_t i = 0; i < N; ++i) {
    Tensor q = q0.clone(), k = k0.clone(), v = v0.clone();
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    attn->set_call(call);
    const Tensor yi = narrow(attn->forward(q, k, v, m), 2, i, 1);
    yi.backward(uniform(yi.shape(), 34 + uint64_t(i)));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t j = i + 1; j < N; ++j)
          for (int64_t d = 0; d < 4; ++d) {
            CHECK(q.grad().at({b, h, j, d}) == 0);
            CHECK(k.grad().at({b, h, j, d}) == 0);
            if (d < 3) CHECK(v.grad().at({b, h, j, d}) == 0);
          }
  }
  // later queries (new codes and clusters), keys and values never change an earlier row: its clusters are those of
  // the queries up to it, its top-k is among the keys it sees
  attn->set_call(call);
  const Tensor ref = attn->forward(q0, k0, v0, m);
  const Tensor q_new = uniform(q0.shape(), 35, -2, 2);
  for (int64_t t = 1; t < N; ++t) {
    Tensor q2 = q0.clone(), k2 = k0.clone(), v2 = v0.clone();
    for (int64_t j = t; j < N; ++j)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t d = 0; d < 4; ++d) {
          q2.set_at({0, h, j, d}, q_new.at({0, h, j, d}));
          k2.set_at({1, h, j, d}, 50.0 * q0.at({1, h, 0, d}));
          if (d < 3) v2.set_at({0, h, j, d}, 1e3);
        }
    attn->set_call(call);
    CHECK(max_abs_diff(narrow(attn->forward(q2, k2, v2, m), 2, 0, t), narrow(ref, 2, 0, t)) == 0);
  }
}

TEST_CASE("improved-clustered and its causal form: bad options and refused masks") {
  auto make = [](const std::string& name, const Opts& opts, bool causal) {
    AttentionConfig cfg;
    cfg.causal = causal;
    cfg.options = AttentionOptions(opts);
    return make_attention(name, cfg);
  };
  CHECK_THROWS_WITH(make("improved-clustered", {{"topk", "0"}}, false),
                    "attention 'improved-clustered': option topk expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(make("causal-improved-clustered", {{"topk", "-1"}}, true),
                    "attention 'causal-improved-clustered': option topk expects an integer >= 1, got '-1'");
  CHECK_THROWS_WITH(make("causal-improved-clustered", {{"clusters", "0"}}, true),
                    "attention 'causal-improved-clustered': option clusters expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(make("improved-clustered", {{"k", "3"}}, false),
                    "attention 'improved-clustered': unknown option 'k'");
  CHECK_THROWS_WITH(make("improved-clustered", {}, true),
                    "attention 'improved-clustered': does not take a causal mask (a centroid stands for queries at "
                    "many positions; causal-improved-clustered is the causal form); it takes: non-causal, key padding, "
                    "cross-attention");
  CHECK(make("causal-improved-clustered", {}, false) != nullptr);  // also usable without a causal mask

  const Tensor q = uniform({1, 2, 4, 4}, 41), k = uniform({1, 2, 4, 4}, 42), v = uniform({1, 2, 4, 3}, 43);
  AttentionMask causal;
  causal.causal = true;
  CHECK_THROWS_WITH(make_improved("improved-clustered", {})->forward(q, k, v, causal),
                    "attention 'improved-clustered': does not take a causal mask (a centroid stands for queries at "
                    "many positions; causal-improved-clustered is the causal form); it takes: non-causal, key padding, "
                    "cross-attention");
  AttentionMask bias;
  bias.bias = zeros({4, 4}, DType::F64);
  CHECK_THROWS_WITH(make_improved("improved-clustered", {})->forward(q, k, v, bias),
                    "attention 'improved-clustered': does not take a bias (a centroid stands for queries at many "
                    "positions; causal-improved-clustered is the causal form); it takes: non-causal, key padding, "
                    "cross-attention");
  AttentionMask keep;
  keep.keep = ones({4, 4});
  CHECK_THROWS_WITH(make_improved("causal-improved-clustered", {})->forward(q, k, v, keep),
                    "attention 'causal-improved-clustered': does not take a keep mask (a centroid stands for queries "
                    "at many positions, so per-query masks cannot apply); it takes: causal, non-causal, key padding, "
                    "query offset, cross-attention");
  AttentionMask lengths;
  lengths.key_lengths = {1, 2};
  CHECK_THROWS_WITH(make_improved("improved-clustered", {})->forward(q, k, v, lengths),
                    "attention 'improved-clustered': key_lengths has 2 entries for a batch of 1");
  // an empty key set and an empty query set give zeros of the right shape
  const Tensor none = make_improved("improved-clustered", {})->forward(q, narrow(k, 2, 0, 0), narrow(v, 2, 0, 0), {});
  CHECK(none.shape() == Shape{1, 2, 4, 3});
  CHECK(make_improved("causal-improved-clustered", {})->forward(narrow(q, 2, 0, 0), k, v, {}).shape() ==
        Shape{1, 2, 0, 3});
}
