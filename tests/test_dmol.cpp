// The discretised mixture of logistics (ops/dmol.h) against a direct evaluation of its defining sum, its
// normalisation over every level, finite differences, and the sampler's frequencies.
#include "ops/dmol.h"

#include <cmath>
#include <vector>

#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

double sigmoid_d(double z) { return 1 / (1 + std::exp(-z)); }

// P(v) by the defining sum, for one row of 3K parameters.
double direct_prob(const std::vector<double>& p, int64_t v, int64_t levels) {
  const int64_t K = int64_t(p.size()) / 3;
  const double half = 1.0 / double(levels - 1), x = 2 * double(v) * half - 1;
  double mx = p[0], z = 0, prob = 0;
  for (int64_t k = 1; k < K; ++k) mx = std::max(mx, p[size_t(k)]);
  for (int64_t k = 0; k < K; ++k) z += std::exp(p[size_t(k)] - mx);
  for (int64_t k = 0; k < K; ++k) {
    const double mu = p[size_t(K + k)], s = std::exp(std::max(p[size_t(2 * K + k)], -7.0));
    const double hi = v == levels - 1 ? 1.0 : sigmoid_d((x + half - mu) / s);
    const double lo = v == 0 ? 0.0 : sigmoid_d((x - half - mu) / s);
    prob += std::exp(p[size_t(k)] - mx) / z * (hi - lo);
  }
  return prob;
}

// Params [rows, 3K] with broad components (log scales in [-1.5, 0]), so that every bin's mass is above the
// 1e-5 where the density stands in for it.
Tensor broad_params(int64_t rows, int64_t K, uint64_t seed) {
  Tensor p = uniform({rows, 3 * K}, seed, -1, 1);
  double* d = p.data<double>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k) d[r * 3 * K + 2 * K + k] = -1.5 + 1.5 * (d[r * 3 * K + 2 * K + k] + 1) / 2;
  return p;
}

}  // namespace

TEST_CASE("dmol: log_prob equals the defining sum of sigmoid differences, every level, f64 and f32") {
  const int64_t K = 3, levels = 16, rows = 4;
  const Tensor p = broad_params(rows, K, 7);
  Tensor values = empty({rows, levels}, DType::I64);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < levels; ++v) values.data<int64_t>()[r * levels + v] = v;
  // every level of every row: params repeated along a new axis
  Tensor params = empty({rows, levels, 3 * K}, DType::F64);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < levels; ++v)
      for (int64_t j = 0; j < 3 * K; ++j)
        params.data<double>()[(r * levels + v) * 3 * K + j] = p.data<double>()[r * 3 * K + j];
  for (DType dt : {DType::F64, DType::F32}) {
    const Tensor lp = dmol_log_prob(params.to(dt), values, levels).to(DType::F64);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> row(p.data<double>() + r * 3 * K, p.data<double>() + (r + 1) * 3 * K);
      double total = 0;
      for (int64_t v = 0; v < levels; ++v) {
        const double want = direct_prob(row, v, levels), got = std::exp(lp.data<double>()[r * levels + v]);
        CHECK(got == doctest::Approx(want).epsilon(dt == DType::F64 ? 1e-10 : 2e-5));
        total += got;
      }
      CHECK(total == doctest::Approx(1.0).epsilon(dt == DType::F64 ? 1e-10 : 1e-5));
    }
  }
}

TEST_CASE("dmol: 256 levels with sharp components still sum to 1 (the density stands in for tiny bins)") {
  const int64_t K = 2, levels = 256;
  Tensor p = from_vector(std::vector<double>{0.3, -0.2, -0.4, 0.5, -4.5, -5.0}, {1, 3 * K}, DType::F64);
  Tensor params = expand(p, {levels, 3 * K}).contiguous();
  Tensor values = empty({levels}, DType::I64);
  for (int64_t v = 0; v < levels; ++v) values.data<int64_t>()[v] = v;
  const Tensor lp = dmol_log_prob(params, values, levels);
  double total = 0;
  for (double l : lp.to_vector()) total += std::exp(l);
  CHECK(total == doctest::Approx(1.0).epsilon(1e-4));
}

TEST_CASE("dmol: finite-difference gradients in the parameters, edge levels included") {
  Tensor values = from_vector(std::vector<double>{0, 3, 7, 15, 9, 1}, {2, 3}, DType::I64);
  check_gradients([values](auto v) { return sum(dmol_log_prob(v[0], values, 16)); }, {reshape(broad_params(6, 2, 11), {2, 3, 6})});
}

TEST_CASE("dmol: sampled frequencies match the probabilities") {
  const int64_t K = 2, levels = 8, n = 40000;
  Tensor p = from_vector(std::vector<double>{0.5, -0.5, -0.5, 0.4, -1.2, -0.8}, {1, 3 * K}, DType::F64);
  Rng rng(5);
  const Tensor s = dmol_sample(expand(p, {n, 3 * K}).contiguous(), levels, rng);
  std::vector<double> freq(levels, 0.0);
  for (int64_t i = 0; i < n; ++i) freq[size_t(s.data<int64_t>()[i])] += 1.0 / double(n);
  std::vector<double> row = p.to_vector();
  double tv = 0;
  for (int64_t v = 0; v < levels; ++v) tv += std::fabs(freq[size_t(v)] - direct_prob(row, v, levels)) / 2;
  CHECK(tv < 0.01);  // the total variation of 40,000 draws is about 0.005 here
}

TEST_CASE("dmol: errors name the op and the shapes") {
  CHECK_THROWS_WITH(dmol_log_prob(zeros({2, 5}), zeros({2}, DType::I64), 256),
                    "dmol_log_prob: params of shape [2, 5] must end in 3K (logits, means, log scales of K components)");
  CHECK_THROWS_WITH(dmol_log_prob(zeros({2, 6}), zeros({3}, DType::I64), 256),
                    "dmol_log_prob: values of shape [3] do not match params of shape [2, 6] without its last dim");
  CHECK_THROWS_WITH(dmol_log_prob(zeros({1, 6}), full({1}, 256.0, DType::I64), 256),
                    "dmol_log_prob: value 256 out of range [0, 256)");
  Rng rng(1);
  CHECK_THROWS_WITH(dmol_sample(zeros({2, 2, 6}), 256, rng), "dmol_sample: params must be [N, 3K], got [2, 2, 6]");
}
