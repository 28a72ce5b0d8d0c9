// The `induced` variant (models/attention/induced.h) against a loop of its pack and unpack formulas, its
// gradients (including the inducing points), key padding and the masks it refuses.
#include <cmath>
#include <limits>
#include <vector>

#include "models/attention/induced.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::uniform;

namespace {

std::unique_ptr<Attention> make_induced(int64_t m) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 3, cfg.seed = 5;
  cfg.options.set("points", std::to_string(m));
  auto a = make_attention("induced", cfg);
  a->to(DType::F64);
  return a;
}

std::vector<double> softmax_of(const std::vector<double>& x) {
  double mx = -std::numeric_limits<double>::infinity(), z = 0;
  for (double v : x) mx = std::max(mx, v);
  std::vector<double> p;
  for (double v : x) z += std::exp(v - mx);
  for (double v : x) p.push_back(std::exp(v - mx) / z);
  return p;
}

// Pack then unpack by loops in double over the keys j < length of each batch element.
Tensor naive_induced(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& points,
                     const std::vector<int64_t>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), N = k.size(2), Dv = v.size(3);
  const int64_t m = points.size(1);
  const double s = 1 / std::sqrt(double(D));
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t n = lengths.empty() ? N : lengths[size_t(b)];
      std::vector<double> kt(size_t(m * D), 0.0), vt(size_t(m * Dv), 0.0);
      for (int64_t p = 0; p < m && n > 0; ++p) {
        std::vector<double> logit;
        for (int64_t j = 0; j < n; ++j) {
          double x = 0;
          for (int64_t d = 0; d < D; ++d) x += points.at({h, p, d}) * k.at({b, h, j, d});
          logit.push_back(x * s);
        }
        const std::vector<double> a = softmax_of(logit);
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t d = 0; d < D; ++d) kt[size_t(p * D + d)] += a[size_t(j)] * k.at({b, h, j, d});
          for (int64_t e = 0; e < Dv; ++e) vt[size_t(p * Dv + e)] += a[size_t(j)] * v.at({b, h, j, e});
        }
      }
      for (int64_t i = 0; i < Lq; ++i) {
        std::vector<double> logit;
        for (int64_t p = 0; p < m; ++p) {
          double x = 0;
          for (int64_t d = 0; d < D; ++d) x += q.at({b, h, i, d}) * kt[size_t(p * D + d)];
          logit.push_back(x * s);
        }
        const std::vector<double> w = softmax_of(logit);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t p = 0; p < m; ++p) acc += w[size_t(p)] * vt[size_t(p * Dv + e)];
          out.set_at({b, h, i, e}, acc);
        }
      }
    }
  return out;
}

}  // namespace

TEST_CASE("induced attention == a loop of pack and unpack (f64 and f32), with padding and cross-attention") {
  for (int64_t m : {1, 3, 8}) {
    auto a = make_induced(m);
    CHECK(a->name() == "induced");
    const Tensor points = a->named_parameters().front().second;
    CHECK(points.shape() == Shape{2, m, 3});
    const Tensor q = uniform({2, 2, 5, 3}, 1, -2, 2), k = uniform({2, 2, 7, 3}, 2, -2, 2), v = uniform({2, 2, 7, 4}, 3);
    for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{4, 7}}) {
      AttentionMask mask;
      mask.key_lengths = lengths;
      const Tensor want = naive_induced(q, k, v, points, lengths);
      CHECK(eng::test::max_abs_diff(a->forward(q, k, v, mask), want) < 1e-13);
      CHECK(eng::test::max_abs_diff(a->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), mask), want) <
            1e-5);
    }
  }
}

TEST_CASE("induced attention: padded keys do not move the output; an element with no key outputs zeros") {
  auto a = make_induced(4);
  const Tensor q = uniform({2, 2, 3, 3}, 4), k = uniform({2, 2, 6, 3}, 5), v = uniform({2, 2, 6, 3}, 6);
  AttentionMask mask;
  mask.key_lengths = {2, 0};
  Tensor k2 = k.clone(), v2 = v.clone();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 3; ++d) k2.set_at({0, h, 4, d}, 1e9), v2.set_at({0, h, 5, d}, -1e9);
  const Tensor y = a->forward(q, k2, v2, mask);
  CHECK(eng::test::max_abs_diff(y, a->forward(q, k, v, mask)) == 0);
  for (double x : narrow(y, 0, 1, 1).to_vector()) CHECK(x == 0);
}

TEST_CASE("induced attention: finite-difference gradients of q, k, v and of the inducing points") {
  auto a = make_induced(3);
  Attention* p = a.get();
  AttentionMask mask;
  mask.key_lengths = {4, 2};
  eng::test::check_gradients([p, mask](auto x) { return p->forward(x[0], x[1], x[2], mask); },
                             {uniform({2, 2, 3, 3}, 7), uniform({2, 2, 4, 3}, 8), uniform({2, 2, 4, 2}, 9)});
  const Tensor q = uniform({2, 2, 3, 3}, 10), k = uniform({2, 2, 4, 3}, 11), v = uniform({2, 2, 4, 2}, 12);
  eng::test::check_parameter_gradients(a->named_parameters(), [&] { return p->forward(q, k, v, mask); });
}

TEST_CASE("induced attention: causal, per-pair masks, bad options and shapes are refused") {
  AttentionConfig cfg;
  cfg.causal = true;
  CHECK_THROWS_WITH(make_attention("induced", cfg), "attention 'induced': does not take a causal mask (every inducing "
                                                    "point pools every key, and the points replace the keys that masks "
                                                    "index); it takes: non-causal, key padding, cross-attention");
  AttentionConfig zero;
  zero.options.set("points", "0");
  CHECK_THROWS_WITH(make_attention("induced", zero), "attention 'induced': option points expects an integer >= 1, got "
                                                     "'0'");
  auto a = make_induced(2);
  const Tensor q = uniform({1, 2, 4, 3}, 13), k = uniform({1, 2, 4, 3}, 14), v = uniform({1, 2, 4, 3}, 15);
  AttentionMask causal;
  causal.causal = true;
  CHECK_THROWS_WITH(a->forward(q, k, v, causal), "attention 'induced': does not take a causal mask (every inducing "
                                                 "point pools every key, and the points replace the keys that masks "
                                                 "index); it takes: non-causal, key padding, cross-attention");
  AttentionMask keep;
  keep.keep = ones({4, 4});
  CHECK_THROWS_WITH(a->forward(q, k, v, keep), "attention 'induced': does not take a keep mask (every inducing point "
                                               "pools every key, and the points replace the keys that masks index); it "
                                               "takes: non-causal, key padding, cross-attention");
  CHECK_THROWS_WITH(a->forward(uniform({1, 3, 4, 3}, 16), uniform({1, 3, 4, 3}, 17), uniform({1, 3, 4, 3}, 18), {}),
                    "attention 'induced': built for 2 heads of dim 3, got q [1, 3, 4, 3]");
}
