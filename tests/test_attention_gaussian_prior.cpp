// The `gaussian-prior` variant (models/attention/gaussian_prior.h): a naive loop of softmax(q kᵀ·scale + G) v,
// σ → ∞ gives softmax attention, finite-difference gradients including log σ, causal leakage, and errors.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "models/attention/gaussian_prior.h"
#include "ops/attention_naive.h"
#include "ops/binary.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::check_parameter_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

AttentionOptions opt(const std::string& key, const std::string& value) {
  AttentionOptions o;
  o.set(key, value);
  return o;
}

std::unique_ptr<Attention> make_gp(AttentionOptions opts = {}) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 3;
  cfg.options = std::move(opts);
  return make_attention("gaussian-prior", cfg);
}

// softmax_j(q_i·k_j·scale − (i + offset − j)² / (2σ_h²)) v over the keys j < end, by loops in double.
Tensor naive_gp(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& sigma,
                const AttentionMask& mask, double scale) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Lk = k.size(2), Dv = v.size(3);
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t end = attention_key_end(mask, b, i, Lk);
        std::vector<double> logit(static_cast<size_t>(Lk));
        double mx = -std::numeric_limits<double>::infinity(), z = 0;
        for (int64_t j = 0; j < end; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += q.at({b, h, i, d}) * k.at({b, h, j, d});
          const double dist = double(i + mask.query_offset - j), sg = sigma[size_t(h)];
          logit[size_t(j)] = s * scale - dist * dist / (2 * sg * sg);
          mx = std::max(mx, logit[size_t(j)]);
        }
        for (int64_t j = 0; j < end; ++j) z += std::exp(logit[size_t(j)] - mx);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < end; ++j) acc += std::exp(logit[size_t(j)] - mx) / z * v.at({b, h, j, e});
          out.set_at({b, h, i, e}, acc);
        }
      }
  return out;
}

}  // namespace

TEST_CASE("gaussian-prior: == a naive loop (f64, f32) for per-head sigmas, with masks and a query offset") {
  auto a = make_gp(opt("sigma", "1.5"));
  CHECK(a->name() == "gaussian-prior");
  a->to(DType::F64);
  auto& gp = dynamic_cast<GaussianPriorAttention&>(*a);
  CHECK(gp.log_sigma().at({1}) == doctest::Approx(std::log(1.5)));
  gp.log_sigma().copy_from(from_vector(std::vector<double>{std::log(0.7), std::log(3.0)}, {2}, DType::F64));
  const std::vector<double> sigma{0.7, 3.0};
  const Tensor q = uniform({2, 2, 5, 3}, 1, -2, 2), k = uniform({2, 2, 7, 3}, 2, -2, 2), v = uniform({2, 2, 7, 2}, 3);
  const double scale = 1.0 / std::sqrt(3.0);
  CHECK(max_abs_diff(a->forward(q, k, v, {}), naive_gp(q, k, v, sigma, {}, scale)) < 1e-13);
  AttentionMask m;
  m.causal = true;
  m.query_offset = 2;  // queries at positions 2..6, as a cached generation would have them
  m.key_lengths = {7, 4};
  CHECK(max_abs_diff(a->forward(q, k, v, m), naive_gp(q, k, v, sigma, m, scale)) < 1e-13);
  const Tensor y32 = a->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m);
  CHECK(y32.dtype() == DType::F32);
  CHECK(max_abs_diff(y32, naive_gp(q, k, v, sigma, m, scale)) < 1e-5);
  // a caller's bias adds to the prior
  AttentionMask mb;
  mb.bias = uniform({1, 2, 5, 7}, 4);
  AttentionMask prior_and_bias;
  prior_and_bias.bias = add(mb.bias, gaussian_prior_bias(gp.log_sigma(), 5, 7, 0));
  CHECK(max_abs_diff(a->forward(q, k, v, mb), naive_attention(q, k, v, prior_and_bias, scale)) < 1e-15);
}

TEST_CASE("gaussian-prior: sigma -> infinity is softmax attention (within max |G| = (L-1)^2 / (2 sigma^2))") {
  // |G| <= 36 / 2e12 = 1.8e-11: each softmax weight moves by at most a relative 2·|G|, so |Δout| <= 4·|G|·max|v|
  auto a = make_gp(opt("sigma", "1e6"));
  a->to(DType::F64);
  const Tensor q = uniform({2, 2, 7, 3}, 5, -2, 2), k = uniform({2, 2, 7, 3}, 6, -2, 2), v = uniform({2, 2, 7, 2}, 7);
  AttentionMask m;
  m.causal = true;
  const double bound = 4 * 36 / 2e12;
  CHECK(max_abs_diff(a->forward(q, k, v, m), naive_attention(q, k, v, m, 1.0 / std::sqrt(3.0))) < bound);
  CHECK(max_abs_diff(a->forward(q, k, v, {}), naive_attention(q, k, v, {}, 1.0 / std::sqrt(3.0))) < bound);
}

TEST_CASE("gaussian-prior: finite-difference gradients of q, k, v and log sigma (f64); causal does not leak") {
  auto a = make_gp(opt("sigma", "1.2"));
  a->to(DType::F64);
  Attention* p = a.get();
  AttentionMask m;
  m.causal = true;
  m.key_lengths = {4, 2};
  const std::vector<Tensor> in{uniform({2, 2, 4, 3}, 8), uniform({2, 2, 4, 3}, 9), uniform({2, 2, 4, 2}, 10)};
  check_gradients([p, m](auto x) { return p->forward(x[0], x[1], x[2], m); }, in);
  check_parameter_gradients(a->named_parameters(), [&] { return a->forward(in[0], in[1], in[2], m); });
  check_gradients([](auto x) { return gaussian_prior_bias(x[0], 3, 5, 1); }, {uniform({2}, 11)});

  AttentionMask c;
  c.causal = true;
  std::vector<Tensor> x{uniform({2, 2, 7, 3}, 12), uniform({2, 2, 7, 3}, 13), uniform({2, 2, 7, 2}, 14)};
  const Tensor y = a->forward(x[0], x[1], x[2], c);
  const int64_t cut = 4;
  std::vector<Tensor> x2;
  for (size_t i = 0; i < 3; ++i) {
    Tensor t = x[i].clone();
    Tensor tail = narrow(t, 2, cut, 7 - cut);
    tail.copy_from(uniform(tail.shape(), 40 + i, -30, 30));
    t.set_requires_grad(true);
    x2.push_back(t);
  }
  const Tensor y2 = a->forward(x2[0], x2[1], x2[2], c);
  CHECK(max_abs_diff(narrow(y2, 2, 0, cut), narrow(y, 2, 0, cut)) == 0);
  sum(narrow(y2, 2, 0, cut)).backward();
  for (const Tensor& t : x2)
    for (double g : narrow(t.grad(), 2, cut, 7 - cut).to_vector()) CHECK(g == 0);
}

TEST_CASE("gaussian-prior: bad options and shapes are refused") {
  CHECK_THROWS_WITH(make_gp(opt("sigma", "0")),
                    "attention 'gaussian-prior': option sigma expects a finite number > 0, got '0'");
  CHECK_THROWS_WITH(make_gp(opt("sigma", "wide")), doctest::Contains("sigma"));
  CHECK_THROWS_WITH(make_gp(opt("scale", "-2")),
                    "attention 'gaussian-prior': option scale expects a finite number > 0, got '-2'");
  CHECK_THROWS_WITH(make_gp(opt("centre", "1")), "attention 'gaussian-prior': unknown option 'centre'");
  auto a = make_gp();
  const Tensor q = uniform({1, 3, 4, 3}, 1).to(DType::F32);
  CHECK_THROWS_WITH(a->forward(q, q, q, {}), "attention 'gaussian-prior': built for 2 heads, got q [1, 3, 4, 3]");
  CHECK_THROWS_WITH(gaussian_prior_bias(ones({2, 2}), 3, 3, 0),
                    "gaussian_prior_bias: log_sigma must be [H], got [2, 2]");
}
