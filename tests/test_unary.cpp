#include "ops/unary.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "engine/autograd.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::allclose;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

using eng::test::check_values;

// d sum(op(x)) / dx at the points xs, in f64.
template <class Op>
std::vector<double> grad_at(const std::vector<double>& xs, Op op) {
  Tensor x = from_vector(xs, {int64_t(xs.size())}, DType::F64);
  x.set_requires_grad(true);
  sum(op(x)).backward();
  return x.grad().to_vector();
}

}  // namespace

GRADCHECK("exp") {
  check_gradients([](auto v) { return exp(v[0]); }, {uniform({3, 5}, 1)});
  check_gradients([](auto v) { return exp(transpose(v[0])); }, {uniform({5, 3}, 2)});
}

GRADCHECK("log") {
  check_gradients([](auto v) { return log(v[0]); }, {uniform({3, 5}, 1, 0.2, 3)});
  check_gradients([](auto v) { return log(transpose(v[0])); }, {uniform({5, 3}, 2, 0.2, 3)});
}

GRADCHECK("sqrt") {
  check_gradients([](auto v) { return sqrt(v[0]); }, {uniform({3, 5}, 1, 0.2, 3)});
  check_gradients([](auto v) { return sqrt(transpose(v[0])); }, {uniform({5, 3}, 2, 0.2, 3)});
}

GRADCHECK("rsqrt") {
  check_gradients([](auto v) { return rsqrt(v[0]); }, {uniform({3, 5}, 1, 0.2, 3)});
  check_gradients([](auto v) { return rsqrt(transpose(v[0])); }, {uniform({5, 3}, 2, 0.2, 3)});
}

GRADCHECK("abs") {
  check_gradients([](auto v) { return abs(v[0]); }, {uniform({3, 5}, 1)});
  check_gradients([](auto v) { return abs(transpose(v[0])); }, {uniform({5, 3}, 2)});
}

GRADCHECK("clamp") {
  check_gradients([](auto v) { return clamp(v[0], -0.5, 0.4); }, {uniform({3, 5}, 1)});
  check_gradients([](auto v) { return clamp(transpose(v[0]), -kInf, 0.1); }, {uniform({5, 3}, 2)});
  check_gradients([](auto v) { return clamp(v[0], -0.3, kInf); }, {uniform({7}, 3)});
}

TEST_CASE("unary: values match std:: in f32 and f64") {
  std::vector<double> pts = {-3, -0.5, 0, 1.25, 10};
  std::vector<double> pos = {0.125, 0.5, 1, 2.75, 1000};
  check_values(pts, [](const Tensor& t) { return exp(t); }, [](double x) { return std::exp(x); });
  check_values(pos, [](const Tensor& t) { return log(t); }, [](double x) { return std::log(x); });
  check_values(pos, [](const Tensor& t) { return sqrt(t); }, [](double x) { return std::sqrt(x); });
  check_values(pos, [](const Tensor& t) { return rsqrt(t); }, [](double x) { return 1 / std::sqrt(x); });
  check_values(pts, [](const Tensor& t) { return abs(t); }, [](double x) { return std::abs(x); });
  check_values(pts, [](const Tensor& t) { return clamp(t, -1, 2); },
               [](double x) { return std::min(std::max(x, -1.0), 2.0); });
  check_values(pts, [](const Tensor& t) { return neg(t); }, [](double x) { return -x; });
}

TEST_CASE("unary: edge values") {
  Tensor z = from_vector(std::vector<double>{0, -1, -1000, 1000}, {4}, DType::F64);
  auto l = log(z).to_vector();
  CHECK(l[0] == -kInf);
  CHECK(std::isnan(l[1]));
  auto e = exp(z).to_vector();
  CHECK(e[2] == 0);
  CHECK(e[3] == kInf);
  CHECK(rsqrt(z).to_vector()[0] == kInf);
  // infinite bounds leave that side unclamped
  CHECK(clamp(z, -kInf, 5).to_vector() == std::vector<double>{0, -1, -1000, 5});
  CHECK(clamp(z, -2, kInf).to_vector() == std::vector<double>{0, -1, -2, 1000});
  CHECK(clamp(z, 3, 3).to_vector() == std::vector<double>{3, 3, 3, 3});
}

TEST_CASE("unary: non-contiguous input") {
  Tensor a = reshape(arange(6, DType::F64), {2, 3});
  Tensor t = transpose(a);  // [3, 2]
  REQUIRE_FALSE(t.is_contiguous());
  Tensor y = sqrt(t);
  CHECK(y.is_contiguous());
  CHECK(y.shape() == Shape{3, 2});
  CHECK(allclose(y, from_vector(std::vector<double>{0, std::sqrt(3.0), 1, 2, std::sqrt(2.0), std::sqrt(5.0)}, {3, 2},
                                DType::F64)));
}

TEST_CASE("unary: gradients at the kinks") {
  CHECK(grad_at({-2, 0, 3}, [](const Tensor& x) { return abs(x); }) == std::vector<double>{-1, 0, 1});
  // 1 strictly inside (lo, hi): 0 at the bounds themselves and outside
  CHECK(grad_at({-1, -0.5, 0.25, 2, 3}, [](const Tensor& x) { return clamp(x, -1, 2); }) ==
        std::vector<double>{0, 1, 1, 0, 0});
  CHECK(grad_at({-1e300, 1e300}, [](const Tensor& x) { return clamp(x, -kInf, kInf); }) == std::vector<double>{1, 1});
  // closed forms, through a gradient that sum() hands back as a stride-0 view
  CHECK(allclose(from_vector(grad_at({0.5, 2}, [](const Tensor& x) { return exp(x); }), {2}, DType::F64),
                 from_vector(std::vector<double>{std::exp(0.5), std::exp(2.0)}, {2}, DType::F64), 1e-15, 0));
  CHECK(allclose(from_vector(grad_at({0.5, 4}, [](const Tensor& x) { return rsqrt(x); }), {2}, DType::F64),
                 from_vector(std::vector<double>{-0.5 * std::pow(0.5, -1.5), -0.5 / 8}, {2}, DType::F64), 1e-14, 0));
}

TEST_CASE("unary: neg is mul_scalar by -1") {
  Tensor x = from_vector(std::vector<double>{1.5, -2}, {2}, DType::F64);
  x.set_requires_grad(true);
  Tensor y = neg(x);
  REQUIRE(bool(y.grad_fn()));
  CHECK(std::string(y.grad_fn()->op) == "mul_scalar");
  CHECK(y.to_vector() == std::vector<double>{-1.5, 2});
  sum(y).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{-1, -1});
}

TEST_CASE("unary: errors name the op") {
  Tensor a = zeros({2, 3});
  CHECK_THROWS_WITH(clamp(a, 2, 1), "clamp: lo = 2 exceeds hi = 1 for input of shape [2, 3]");
  CHECK_THROWS_WITH(clamp(a, std::nan(""), 1),
                    "clamp: bounds must not be NaN, got lo = nan, hi = 1 for input of shape [2, 3]");
  Tensor i = zeros({2}, DType::I64);
  CHECK_THROWS_WITH(log(i), "log: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
  CHECK_THROWS_WITH(exp(i), "exp: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
  CHECK_THROWS_WITH(clamp(i, 0, 1), "clamp: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
}
