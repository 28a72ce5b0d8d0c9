// The `routing` variant (models/attention/routing.h): one cluster against full softmax attention, the routed
// attention against a naive reading of the definition on the same routes, the routes against top-w by loops,
// causal leakage, the online k-means EMA step, finite-difference gradients, and the errors.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "models/attention/routing.h"
#include "ops/attention_naive.h"
#include "ops/norm.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

using Rows = std::vector<std::vector<double>>;

std::unique_ptr<RoutingAttention> make_routing(const std::map<std::string, std::string>& opts, uint64_t seed = 5) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 4, cfg.seed = seed;
  cfg.options = AttentionOptions(opts);
  std::unique_ptr<Attention> a = make_attention("routing", cfg);
  auto* r = dynamic_cast<RoutingAttention*>(a.get());
  REQUIRE(r != nullptr);
  a.release();
  return std::unique_ptr<RoutingAttention>(r);
}

// Layer norm without scale or bias by loops (biased variance, eps 1e-5) of the N rows of x at (b, h).
Rows normalised(const Tensor& x, int64_t b, int64_t h) {
  const int64_t N = x.size(2), D = x.size(3);
  Rows out(static_cast<size_t>(N), std::vector<double>(static_cast<size_t>(D)));
  for (int64_t i = 0; i < N; ++i) {
    double mean = 0, var = 0;
    for (int64_t d = 0; d < D; ++d) mean += x.at({b, h, i, d}) / double(D);
    for (int64_t d = 0; d < D; ++d) var += (x.at({b, h, i, d}) - mean) * (x.at({b, h, i, d}) - mean) / double(D);
    for (int64_t d = 0; d < D; ++d) out[size_t(i)][size_t(d)] = (x.at({b, h, i, d}) - mean) / std::sqrt(var + 1e-5);
  }
  return out;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t d = 0; d < a.size(); ++d) s += a[d] * b[d];
  return s;
}

std::vector<double> centroid(const RoutingAttention& a, int64_t h, int64_t c) {
  std::vector<double> mu;
  for (int64_t d = 0; d < a.centroids().size(2); ++d) mu.push_back(a.centroids().at({h, c, d}));
  return mu;
}

// The definition on given routes: query i of set Q_c softmaxes over the keys j of K_c with j < length (and
// j <= i when causal); o_i is the mean over the sets where i sees a key, zeros if none.
Tensor naive_routing(const Tensor& q, const Tensor& k, const Tensor& v, const RoutingAttention::Routes& r, bool causal,
                     const std::vector<int64_t>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3), Dv = v.size(3);
  const int64_t C = r.queries.size(2), w = r.queries.size(3);
  Tensor out = zeros({B, H, N, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const Rows qn = normalised(q, b, h), kn = normalised(k, b, h);
      const int64_t len = lengths.empty() ? N : lengths[size_t(b)];
      for (int64_t i = 0; i < N; ++i) {
        std::vector<double> acc(static_cast<size_t>(Dv), 0.0);
        int64_t sets = 0;
        for (int64_t c = 0; c < C; ++c) {
          bool member = false;
          for (int64_t s = 0; s < w; ++s) member = member || int64_t(r.queries.at({b, h, c, s})) == i;
          if (!member) continue;
          std::vector<int64_t> keys;
          for (int64_t t = 0; t < w; ++t) {
            const int64_t j = int64_t(r.keys.at({b, h, c, t}));
            if (j < len && (!causal || j <= i)) keys.push_back(j);
          }
          if (keys.empty()) continue;
          ++sets;
          std::vector<double> e;
          double z = 0;
          for (int64_t j : keys) e.push_back(std::exp(dot(qn[size_t(i)], kn[size_t(j)]) / std::sqrt(double(D))));
          for (double x : e) z += x;
          for (size_t t = 0; t < keys.size(); ++t)
            for (int64_t f = 0; f < Dv; ++f) acc[size_t(f)] += e[t] / z * v.at({b, h, keys[t], f});
        }
        for (int64_t f = 0; f < Dv; ++f) out.set_at({b, h, i, f}, sets ? acc[size_t(f)] / double(sets) : 0.0);
      }
    }
  return out;
}

// The causal definition by loops: query i and key j go to their nearest centroid (largest μ_c·x̂, the first on
// ties); i softmaxes over the w most recent keys j <= i, j < length, of its centroid (all of them with w = 0), and
// gets zeros when there is none. Also checks causal_routes() against the same loops.
Tensor naive_causal_routing(const RoutingAttention& a, const Tensor& q, const Tensor& k, const Tensor& v, int64_t w,
                            const std::vector<int64_t>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3), Dv = v.size(3), C = a.clusters();
  AttentionMask m;
  m.key_lengths = lengths;
  const RoutingAttention::Routes r = a.causal_routes(q, k, m);
  Tensor out = zeros({B, H, N, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const Rows qn = normalised(q, b, h), kn = normalised(k, b, h);
      auto route = [&](const std::vector<double>& x) {
        int64_t best = 0;
        for (int64_t c = 1; c < C; ++c)
          if (dot(centroid(a, h, c), x) > dot(centroid(a, h, best), x)) best = c;
        return best;
      };
      const int64_t len = lengths.empty() ? N : lengths[size_t(b)];
      for (int64_t i = 0; i < N; ++i) {
        const int64_t c = route(qn[size_t(i)]);
        CHECK(int64_t(r.queries.at({b, h, i})) == c);
        std::vector<int64_t> keys;
        for (int64_t j = std::min(i, len - 1); j >= 0 && (w == 0 || int64_t(keys.size()) < w); --j)
          if (route(kn[size_t(j)]) == c) keys.push_back(j);
        for (int64_t s = 0; s < r.keys.size(3); ++s)
          CHECK(int64_t(r.keys.at({b, h, i, s})) == (s < int64_t(keys.size()) ? keys[size_t(s)] : -1));
        std::vector<double> e;
        double z = 0;
        for (int64_t j : keys) e.push_back(std::exp(dot(qn[size_t(i)], kn[size_t(j)]) / std::sqrt(double(D))));
        for (double x : e) z += x;
        for (int64_t f = 0; f < Dv; ++f) {
          double acc = 0;
          for (size_t t = 0; t < keys.size(); ++t) acc += e[t] / z * v.at({b, h, keys[t], f});
          out.set_at({b, h, i, f}, acc);
        }
      }
    }
  return out;
}

}  // namespace

TEST_CASE("routing: one cluster and window N == full softmax attention of the layer-normalised q, k (f64, f32)") {
  auto attn = make_routing({{"clusters", "1"}});
  CHECK(attn->name() == "routing");
  const Tensor q = uniform({2, 2, 7, 4}, 1, -2, 2), k = uniform({2, 2, 7, 4}, 2, -2, 2), v = uniform({2, 2, 7, 3}, 3);
  const Tensor qn = layer_norm(q, Tensor(), Tensor()), kn = layer_norm(k, Tensor(), Tensor());
  for (bool causal : {false, true}) {
    AttentionMask m;
    m.causal = causal;
    m.key_lengths = {5, 7};
    CHECK(max_abs_diff(attn->forward(q, k, v, m), naive_attention(qn, kn, v, m, 0.5)) < 1e-12);
    CHECK(max_abs_diff(attn->forward(q, k, v, {}), naive_attention(qn, kn, v, {}, 0.5)) < 1e-12);
    const Tensor y32 = attn->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m);
    CHECK(y32.dtype() == DType::F32);
    CHECK(max_abs_diff(y32, naive_attention(qn, kn, v, m, 0.5)) < 1e-5);
  }
}

TEST_CASE("routing shared_qk: one cluster == full attention of LN(q) on itself with the self logit at -1e5") {
  auto attn = make_routing({{"clusters", "1"}, {"shared_qk", "true"}});
  const Tensor q = uniform({2, 2, 6, 4}, 4, -2, 2), v = uniform({2, 2, 6, 3}, 5);
  const Tensor k_unused = full({2, 2, 6, 4}, std::nan(""), DType::F64);  // never read
  const Tensor qn = layer_norm(q, Tensor(), Tensor());
  std::vector<double> diag(36, 0.0);
  for (int64_t i = 0; i < 6; ++i) diag[size_t(i * 6 + i)] = -1e5;
  for (bool causal : {false, true}) {
    AttentionMask m;
    m.causal = causal;
    m.key_lengths = {4, 6};
    AttentionMask ref = m;
    ref.bias = from_vector(diag, {6, 6}, DType::F64);
    const Tensor y = attn->forward(q, k_unused, v, m);
    CHECK(max_abs_diff(y, naive_attention(qn, qn, v, ref, 0.5)) < 1e-12);
    // Row 0 of a causal mask sees only itself: it gets its own value, not zeros.
    if (causal) CHECK(std::abs(y.at({0, 1, 0, 2}) - v.at({0, 1, 0, 2})) < 1e-12);
  }
}

TEST_CASE("routing: the routes are each centroid's top-w queries and keys by μ·x̂; padded keys rank last") {
  auto attn = make_routing({{"clusters", "3"}, {"window", "4"}});
  const int64_t N = 9;
  const Tensor q = uniform({2, 2, N, 4}, 11, -2, 2), k = uniform({2, 2, N, 4}, 12, -2, 2);
  AttentionMask m;
  m.key_lengths = {6, 2};
  const RoutingAttention::Routes r = attn->routes(q, k, m);
  CHECK(r.queries.shape() == Shape{2, 2, 3, 4});
  CHECK(attn->window(N) == 4);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h) {
      const Rows qn = normalised(q, b, h), kn = normalised(k, b, h);
      for (int64_t c = 0; c < 3; ++c) {
        const std::vector<double> mu = centroid(*attn, h, c);
        for (bool keys : {false, true}) {
          const Tensor& set = keys ? r.keys : r.queries;
          std::vector<bool> in(static_cast<size_t>(N), false);
          for (int64_t s = 0; s < 4; ++s) {
            if (s > 0) CHECK(set.at({b, h, c, s}) > set.at({b, h, c, s - 1}));  // increasing positions
            in[size_t(set.at({b, h, c, s}))] = true;
          }
          // Every member outranks every non-member: real keys by score, then padded keys by lower position.
          auto rank = [&](int64_t i) {
            const bool padded = keys && i >= m.key_lengths[size_t(b)];
            return padded ? std::make_pair(0, -double(i))
                          : std::make_pair(1, dot(mu, keys ? kn[size_t(i)] : qn[size_t(i)]));
          };
          for (int64_t i = 0; i < N; ++i)
            for (int64_t j = 0; j < N; ++j)
              if (in[size_t(i)] && !in[size_t(j)]) CHECK(rank(i) >= rank(j));
        }
      }
    }
}

TEST_CASE("routing == the definition by loops on the same routes: several clusters, causal, padding, f32") {
  auto attn = make_routing({{"clusters", "3"}, {"window", "3"}});
  attn->eval();
  const Tensor q = uniform({2, 2, 8, 4}, 21, -2, 2), k = uniform({2, 2, 8, 4}, 22, -2, 2), v = uniform({2, 2, 8, 3}, 23);
  for (bool causal : {false, true})
    for (bool pad : {false, true}) {
      AttentionMask m;
      m.causal = causal;
      if (pad) m.key_lengths = {5, 0};  // batch element 1 has no key: zeros
      const Tensor ref = causal ? naive_causal_routing(*attn, q, k, v, 3, m.key_lengths)
                                : naive_routing(q, k, v, attn->routes(q, k, m), false, m.key_lengths);
      CHECK(max_abs_diff(attn->forward(q, k, v, m), ref) < 1e-12);
      CHECK(max_abs_diff(attn->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m), ref) < 1e-5);
    }
  // causal with window 0: every earlier key of the query's cluster (N = 12: lists past 3)
  auto all = make_routing({{"clusters", "3"}});
  all->eval();
  const Tensor q12 = uniform({2, 2, 12, 4}, 24, -2, 2), k12 = uniform({2, 2, 12, 4}, 25, -2, 2);
  const Tensor v12 = uniform({2, 2, 12, 3}, 26);
  AttentionMask causal;
  causal.causal = true;
  CHECK(all->causal_routes(q12, k12).keys.size(3) > 3);
  CHECK(max_abs_diff(all->forward(q12, k12, v12, causal), naive_causal_routing(*all, q12, k12, v12, 0, {})) < 1e-12);
  // the default window: ceil(N / clusters) = 3 for N = 8 and 3 clusters, the same as above
  auto dflt = make_routing({{"clusters", "3"}});
  dflt->eval();
  CHECK(dflt->window(8) == 3);
  CHECK(max_abs_diff(dflt->forward(q, k, v, {}), naive_routing(q, k, v, dflt->routes(q, k), false, {})) < 1e-12);
}

TEST_CASE("routing causal: with the clustering fixed (eval), out_i has no gradient from q, k, v at j > i") {
  auto attn = make_routing({{"clusters", "2"}, {"window", "6"}});
  attn->eval();
  const int64_t N = 8;
  const Tensor q0 = uniform({2, 2, N, 4}, 31, -2, 2), k0 = uniform({2, 2, N, 4}, 32, -2, 2);
  const Tensor v0 = uniform({2, 2, N, 3}, 33);
  AttentionMask m;
  m.causal = true;
  m.key_lengths = {8, 6};
  for (int64_t i = 0; i < N; ++i) {
    Tensor q = q0.clone(), k = k0.clone(), v = v0.clone();
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    const Tensor yi = narrow(attn->forward(q, k, v, m), 2, i, 1);
    yi.backward(uniform(yi.shape(), 34 + uint64_t(i)));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t j = i + 1; j < N; ++j) {
          for (int64_t d = 0; d < 4; ++d) CHECK(q.grad().at({b, h, j, d}) == 0);
          for (int64_t d = 0; d < 4; ++d) CHECK(k.grad().at({b, h, j, d}) == 0);
          for (int64_t e = 0; e < 3; ++e) CHECK(v.grad().at({b, h, j, e}) == 0);
        }
  }
  // Huge future values, and future queries and keys drawn anew (new routes), leave every earlier output bitwise the
  // same: a route is a function of one position, and a query's key list walks back from it.
  const Tensor ref = attn->forward(q0, k0, v0, m);
  Tensor v2 = v0.clone(), q2 = q0.clone(), k2 = k0.clone();
  const Tensor q_new = uniform(q0.shape(), 35, -2, 2), k_new = uniform(k0.shape(), 36, -2, 2);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t e = 0; e < 3; ++e) v2.set_at({0, h, 5, e}, 1e9);
    for (int64_t j = 5; j < N; ++j)
      for (int64_t d = 0; d < 4; ++d) {
        q2.set_at({0, h, j, d}, q_new.at({0, h, j, d}));
        k2.set_at({0, h, j, d}, k_new.at({0, h, j, d}));
      }
  }
  CHECK(max_abs_diff(attn->causal_routes(q2, k2).queries, attn->causal_routes(q0, k0).queries) > 0);
  CHECK(max_abs_diff(narrow(narrow(attn->forward(q2, k2, v2, m), 0, 0, 1), 2, 0, 5),
                     narrow(narrow(ref, 0, 0, 1), 2, 0, 5)) == 0);
}

TEST_CASE("routing: a training forward is one EMA step of the online k-means (== loops); eval leaves it bitwise") {
  auto attn = make_routing({{"clusters", "3"}, {"decay", "0.75"}});
  const Tensor q = uniform({2, 2, 6, 4}, 41, -2, 2), k = uniform({2, 2, 6, 4}, 42, -2, 2), v = uniform({2, 2, 6, 2}, 43);
  AttentionMask m;
  m.key_lengths = {6, 3};  // positions >= the length take no part in the update
  const std::vector<double> before = attn->centroids().to_vector();
  attn->eval();
  attn->forward(q, k, v, m);
  CHECK(attn->centroids().to_vector() == before);

  // Naive step: each real q̂ and k̂ goes to its nearest centroid (largest μ·x̂, first on ties); a centroid moves to
  // λ μ + (1 − λ) · the mean of what it got, and stays if it got nothing.
  std::vector<double> expect = before;
  for (int64_t h = 0; h < 2; ++h) {
    std::vector<std::vector<double>> sums(3, std::vector<double>(4, 0.0));
    std::vector<double> counts(3, 0.0);
    for (int64_t b = 0; b < 2; ++b) {
      const Rows qn = normalised(q, b, h), kn = normalised(k, b, h);
      for (int64_t i = 0; i < m.key_lengths[size_t(b)]; ++i)
        for (const auto& x : {qn[size_t(i)], kn[size_t(i)]}) {
          int64_t best = 0;
          for (int64_t c = 1; c < 3; ++c)
            if (dot(centroid(*attn, h, c), x) > dot(centroid(*attn, h, best), x)) best = c;
          for (size_t d = 0; d < 4; ++d) sums[size_t(best)][d] += x[d];
          counts[size_t(best)] += 1;
        }
    }
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t d = 0; d < 4; ++d)
        if (counts[size_t(c)] > 0)
          expect[size_t((h * 3 + c) * 4 + d)] =
              0.75 * before[size_t((h * 3 + c) * 4 + d)] + 0.25 * sums[size_t(c)][size_t(d)] / counts[size_t(c)];
  }
  attn->train();
  Tensor qg = q.clone();
  qg.set_requires_grad(true);
  const Tensor y = attn->forward(qg, k, v, m);
  const std::vector<double> after = attn->centroids().to_vector();
  double diff = 0;
  for (size_t e = 0; e < after.size(); ++e) diff = std::max(diff, std::abs(after[e] - expect[e]));
  CHECK(diff < 1e-12);
  CHECK(after != before);
  y.backward(uniform(y.shape(), 44));  // the centroids are a buffer: the graph never reaches them
  CHECK(!attn->centroids().requires_grad());
  CHECK(attn->named_parameters().empty());
  CHECK(attn->named_buffers().size() == 1);
}

TEST_CASE("routing: finite-difference gradient of q, k, v (f64, eval), causal and padded") {
  auto attn = make_routing({{"clusters", "2"}, {"window", "4"}});
  attn->eval();
  Attention* a = attn.get();
  const std::vector<Tensor> qkv{uniform({2, 2, 6, 4}, 51, -2, 2), uniform({2, 2, 6, 4}, 52, -2, 2),
                                uniform({2, 2, 6, 3}, 53)};
  check_gradients([a](auto x) { return a->forward(x[0], x[1], x[2], {}); }, qkv);
  AttentionMask m;
  m.causal = true;
  m.key_lengths = {4, 6};
  check_gradients([a, m](auto x) { return a->forward(x[0], x[1], x[2], m); }, qkv);
}

TEST_CASE("routing: bad options, refused masks and shapes are errors") {
  auto bad = [](const std::string& key, const std::string& value) {
    AttentionConfig cfg;
    cfg.options.set(key, value);
    return make_attention("routing", cfg);
  };
  CHECK_THROWS_WITH(bad("clusters", "0"), "attention 'routing': option clusters expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(bad("window", "-1"), "attention 'routing': option window expects an integer >= 0, got '-1'");
  CHECK_THROWS_WITH(bad("decay", "1"), "attention 'routing': option decay expects a finite number in [0, 1), got '1'");
  CHECK_THROWS_WITH(bad("buckets", "4"), "attention 'routing': unknown option 'buckets'");

  auto attn = make_routing({});
  const Tensor q = uniform({1, 2, 4, 4}, 61), v = uniform({1, 2, 4, 3}, 62);
  const std::string why = " (queries and keys of one sequence are routed in pairs of sets, and logits "
                          "exist only inside them); it takes: causal, non-causal, key padding";
  AttentionMask keep;
  keep.keep = ones({4, 4});
  CHECK_THROWS_WITH(attn->forward(q, q, v, keep), ("attention 'routing': does not take a keep mask" + why).c_str());
  AttentionMask bias;
  bias.bias = zeros({4, 4}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, q, v, bias), ("attention 'routing': does not take a bias" + why).c_str());
  AttentionMask alibi;
  alibi.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, q, v, alibi), ("attention 'routing': does not take ALiBi slopes" + why).c_str());
  AttentionMask offset;
  offset.causal = true, offset.query_offset = 2;
  CHECK_THROWS_WITH(attn->forward(q, q, v, offset), ("attention 'routing': does not take causal queries that continue "
                                                     "a sequence (query_offset 2, 4 queries, 4 keys; step() continues "
                                                     "one)" + why).c_str());
  CHECK_THROWS_WITH(attn->forward(narrow(q, 2, 0, 3), q, v, {}),
                    ("attention 'routing': does not take cross-attention (3 queries, 4 keys)" + why).c_str());
  const Tensor q3 = uniform({1, 2, 4, 3}, 63);
  CHECK_THROWS_WITH(attn->forward(q3, q3, v, {}), "attention 'routing': q [1, 2, 4, 3] needs 2 heads of dim 4 (the "
                                                 "centroids are [2, 8, 4])");
  CHECK_THROWS_WITH(attn->step(q, q, v, *std::make_unique<AttentionState>(), {}),
                    "attention 'routing': no recurrent form (step) for this variant");
  CHECK(attn->new_state() == nullptr);
}
