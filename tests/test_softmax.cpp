#include "ops/softmax.h"

#include <cmath>
#include <limits>

#include "ops/binary.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// exp(x) / sum(exp(x)) along axis 1 of a [A, B, C] tensor, by the textbook formula.
std::vector<double> naive_softmax_axis1(const Tensor& x) {
  const int64_t A = x.shape()[0], B = x.shape()[1], C = x.shape()[2];
  std::vector<double> out(size_t(A * B * C));
  for (int64_t i = 0; i < A; ++i)
    for (int64_t k = 0; k < C; ++k) {
      double total = 0;
      for (int64_t j = 0; j < B; ++j) total += std::exp(x.at({i, j, k}));
      for (int64_t j = 0; j < B; ++j) out[size_t((i * B + j) * C + k)] = std::exp(x.at({i, j, k})) / total;
    }
  return out;
}

}  // namespace

GRADCHECK("softmax") {
  for (int64_t axis : {0, 1, -1})
    check_gradients([axis](auto v) { return softmax(v[0], axis); }, {uniform({2, 3, 4}, uint64_t(axis + 10), -2, 2)});
  check_gradients([](auto v) { return softmax(transpose(v[0], 0, 2)); }, {uniform({4, 3, 2}, 1, -2, 2)});
  check_gradients([](auto v) { return softmax(transpose(v[0]), 0); }, {uniform({3, 5}, 2, -2, 2)});
}

GRADCHECK("log_softmax") {
  for (int64_t axis : {0, 1, -1})
    check_gradients([axis](auto v) { return log_softmax(v[0], axis); },
                    {uniform({2, 3, 4}, uint64_t(axis + 10), -2, 2)});
  check_gradients([](auto v) { return log_softmax(transpose(v[0], 0, 2)); }, {uniform({4, 3, 2}, 1, -2, 2)});
}

TEST_CASE("softmax: values match the naive formula on every axis and layout") {
  Tensor x = uniform({2, 3, 4}, 5, -3, 3);
  Tensor y = softmax(x, 1);
  CHECK(y.shape() == x.shape());
  CHECK(eng::test::allclose(y, from_vector(naive_softmax_axis1(x), {2, 3, 4}, DType::F64), 1e-12, 1e-14));
  // the same rows reached as the last axis of a permuted (non-contiguous) view
  Tensor p = softmax(permute(x, {0, 2, 1}), -1);
  CHECK(eng::test::allclose(permute(p, {0, 2, 1}).contiguous(), y, 1e-12, 1e-14));
  // f32 agrees with f64 to f32 precision, and rows sum to 1
  Tensor y32 = softmax(x.to(DType::F32), 1);
  CHECK(y32.dtype() == DType::F32);
  CHECK(eng::test::max_abs_diff(y32.to(DType::F64), y) < 1e-6);
  auto s = sum(softmax(x, 0), {0}).to_vector();
  for (double v : s) CHECK(v == doctest::Approx(1.0).epsilon(1e-12));
  // enough rows for several threads, along a middle axis
  Tensor big = uniform({40, 30, 50}, 6, -3, 3);
  CHECK(eng::test::allclose(softmax(big, 1), from_vector(naive_softmax_axis1(big), big.shape(), DType::F64), 1e-12,
                            1e-14));
}

TEST_CASE("softmax: huge logits stay finite") {
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = from_vector(std::vector<double>{1000, 1001, -1000, -1001}, {2, 2}, dt);
    const double e = std::exp(1.0);
    auto y = softmax(x).to_vector();
    CHECK(y[0] == doctest::Approx(1 / (1 + e)));
    CHECK(y[1] == doctest::Approx(e / (1 + e)));
    CHECK(y[2] == doctest::Approx(e / (1 + e)));
    CHECK(y[3] == doctest::Approx(1 / (1 + e)));
    auto l = log_softmax(x).to_vector();
    CHECK(l[0] == doctest::Approx(-std::log(1 + e)));
    CHECK(l[1] == doctest::Approx(1 - std::log(1 + e)));
    CHECK(l[3] == doctest::Approx(-std::log(1 + e)));
  }
}

TEST_CASE("softmax: a row of all -inf gives zeros (not NaN), and a zero gradient") {
  Tensor x = from_vector(std::vector<double>{-kInf, -kInf, -kInf, -kInf, 0, 0, 1, 2, 3}, {3, 3}, DType::F64);
  x.set_requires_grad(true);
  Tensor y = softmax(x);
  auto v = y.to_vector();
  CHECK(std::vector<double>(v.begin(), v.begin() + 3) == std::vector<double>{0, 0, 0});
  CHECK(std::vector<double>(v.begin() + 3, v.begin() + 6) == std::vector<double>{0, 0.5, 0.5});  // masked entry
  y.backward(uniform({3, 3}, 9));
  auto g = x.grad().to_vector();
  for (size_t i = 0; i < 4; ++i) CHECK(g[i] == 0);
  for (double gi : g) CHECK(std::isfinite(gi));
  // the same along axis 0 in f32: column 0 is entirely -inf
  Tensor c = softmax(transpose(x.detach()).to(DType::F32), 0);
  CHECK(c.to_vector()[0] == 0);
  CHECK(c.to_vector()[3] == 0);
  // log_softmax of such a row is the log of those zeros
  auto l = log_softmax(x.detach()).to_vector();
  CHECK(l[0] == -kInf);
  CHECK(l[4] == doctest::Approx(std::log(0.5)));
}

TEST_CASE("softmax: NaN in a row makes that row NaN only") {
  Tensor x = from_vector(std::vector<double>{1, std::nan(""), 2, 1, 2, 3}, {2, 3}, DType::F64);
  auto y = softmax(x).to_vector();
  for (size_t i = 0; i < 3; ++i) CHECK(std::isnan(y[i]));
  for (size_t i = 3; i < 6; ++i) CHECK(std::isfinite(y[i]));
}

TEST_CASE("softmax: log_softmax equals log(softmax) in f64") {
  Tensor x = uniform({3, 4, 5}, 11, -5, 5);
  for (int64_t axis : {0, 1, 2}) {
    auto l = log_softmax(x, axis).to_vector(), s = softmax(x, axis).to_vector();
    double worst = 0;
    for (size_t i = 0; i < l.size(); ++i) worst = std::max(worst, std::abs(l[i] - std::log(s[i])));
    CHECK(worst < 1e-13);
  }
}

TEST_CASE("softmax: errors name the op") {
  CHECK_THROWS_WITH(softmax(zeros({2, 3}), 2), "softmax: axis 2 out of range for a 2-D tensor");
  CHECK_THROWS_WITH(log_softmax(zeros({2}), -2), "log_softmax: axis -2 out of range for a 1-D tensor");
  CHECK_THROWS_WITH(softmax(zeros({2}, DType::I64)),
                    "softmax: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
}
