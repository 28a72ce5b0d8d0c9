#include "ops/activation.h"

#include <cmath>
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

// Points from both tails to around 0 (all exact in f32).
const std::vector<double> kPoints = {-1000, -30, -2.5, -0.5, -0.125, 0.375, 1, 3, 30, 1000};

// Activations in f32 are compared at 2e-6 relative (their std:: references are double).
template <class Op, class Ref>
void check_values(const std::vector<double>& xs, Op op, Ref ref) {
  eng::test::check_values(xs, op, ref, 2e-6);
}

// d sum(op(x)) / dx at the points xs.
template <class Op>
std::vector<double> grad_at(const std::vector<double>& xs, Op op, DType dtype = DType::F64) {
  Tensor x = from_vector(xs, {int64_t(xs.size())}, dtype);
  x.set_requires_grad(true);
  sum(op(x)).backward();
  return x.grad().to_vector();
}

double ref_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double ref_softplus(double x, double beta, double threshold) {
  return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}

}  // namespace

GRADCHECK("relu") {
  check_gradients([](auto v) { return relu(v[0]); }, {uniform({3, 5}, 1)});
  check_gradients([](auto v) { return relu(transpose(v[0])); }, {uniform({5, 3}, 2)});
}

GRADCHECK("gelu_erf") {
  check_gradients([](auto v) { return gelu(v[0], GeluForm::Erf); }, {uniform({3, 5}, 1, -4, 4)});
  check_gradients([](auto v) { return gelu(transpose(v[0])); }, {uniform({5, 3}, 2, -4, 4)});
}

GRADCHECK("gelu_tanh") {
  check_gradients([](auto v) { return gelu(v[0], GeluForm::Tanh); }, {uniform({3, 5}, 1, -4, 4)});
  check_gradients([](auto v) { return gelu(transpose(v[0]), GeluForm::Tanh); }, {uniform({5, 3}, 2, -4, 4)});
}

GRADCHECK("elu") {
  check_gradients([](auto v) { return elu(v[0]); }, {uniform({3, 5}, 1, -3, 3)});
  check_gradients([](auto v) { return elu(transpose(v[0]), 0.7); }, {uniform({5, 3}, 2, -3, 3)});
  check_gradients([](auto v) { return elu(v[0], -0.5); }, {uniform({7}, 3, -3, 3)});  // sign of y differs from x
}

GRADCHECK("sigmoid") {
  check_gradients([](auto v) { return sigmoid(v[0]); }, {uniform({3, 5}, 1, -8, 8)});
  check_gradients([](auto v) { return sigmoid(transpose(v[0])); }, {uniform({5, 3}, 2, -8, 8)});
}

GRADCHECK("tanh") {
  check_gradients([](auto v) { return tanh(v[0]); }, {uniform({3, 5}, 1, -3, 3)});
  check_gradients([](auto v) { return tanh(transpose(v[0])); }, {uniform({5, 3}, 2, -3, 3)});
}

GRADCHECK("softplus") {
  check_gradients([](auto v) { return softplus(v[0]); }, {uniform({3, 5}, 1, -8, 8)});
  // beta x crosses the threshold for x > 1.5: both branches are checked
  check_gradients([](auto v) { return softplus(transpose(v[0]), 2, 3); }, {uniform({5, 3}, 2, -3, 3)});
}

GRADCHECK("silu") {
  check_gradients([](auto v) { return silu(v[0]); }, {uniform({3, 5}, 1, -8, 8)});
  check_gradients([](auto v) { return silu(transpose(v[0])); }, {uniform({5, 3}, 2, -8, 8)});
}

TEST_CASE("activation: values match std:: formulas in f32 and f64") {
  check_values(kPoints, [](const Tensor& t) { return relu(t); }, [](double x) { return x > 0 ? x : 0; });
  check_values(kPoints, [](const Tensor& t) { return gelu(t); },
               [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); });
  check_values(kPoints, [](const Tensor& t) { return gelu(t, GeluForm::Tanh); }, [](double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
  });
  check_values(kPoints, [](const Tensor& t) { return elu(t); }, [](double x) { return x > 0 ? x : std::exp(x) - 1; });
  check_values(kPoints, [](const Tensor& t) { return elu(t, 1.5); },
               [](double x) { return x > 0 ? x : 1.5 * (std::exp(x) - 1); });
  check_values(kPoints, [](const Tensor& t) { return sigmoid(t); }, ref_sigmoid);
  check_values(kPoints, [](const Tensor& t) { return tanh(t); }, [](double x) { return std::tanh(x); });
  check_values(kPoints, [](const Tensor& t) { return softplus(t); }, [](double x) { return ref_softplus(x, 1, 20); });
  check_values(kPoints, [](const Tensor& t) { return softplus(t, 2, 3); },
               [](double x) { return ref_softplus(x, 2, 3); });
  check_values(kPoints, [](const Tensor& t) { return silu(t); }, [](double x) { return x * ref_sigmoid(x); });
}

TEST_CASE("activation: known values") {
  Tensor one = from_vector(std::vector<double>{1}, {1}, DType::F64);
  CHECK(gelu(one).item() == doctest::Approx(0.8413447460685429).epsilon(1e-15));
  CHECK(gelu(one, GeluForm::Tanh).item() == doctest::Approx(0.8411919906082768).epsilon(1e-15));
  CHECK(elu(from_vector(std::vector<double>{-2}, {1}, DType::F64), 0.5).item() ==
        doctest::Approx(0.5 * (std::exp(-2.0) - 1)).epsilon(1e-15));
}

TEST_CASE("activation: tails are exact and never NaN") {
  for (DType dt : {DType::F32, DType::F64}) {
    CAPTURE(dtype_name(dt));
    Tensor x = from_vector(std::vector<double>{-1000, 1000}, {2}, dt);
    CHECK(sigmoid(x).to_vector() == std::vector<double>{0, 1});
    CHECK(tanh(x).to_vector() == std::vector<double>{-1, 1});
    CHECK(silu(x).to_vector() == std::vector<double>{0, 1000});
    CHECK(elu(x, 2).to_vector() == std::vector<double>{-2, 1000});
    CHECK(gelu(x).to_vector() == std::vector<double>{0, 1000});
    CHECK(gelu(x, GeluForm::Tanh).to_vector() == std::vector<double>{0, 1000});
    auto sp = softplus(x).to_vector();
    CHECK(sp[0] >= 0);
    CHECK(sp[0] < 1e-30);
    CHECK(sp[1] == 1000);
    // the stable form needs no threshold to stay finite
    CHECK(softplus(x, 1, INFINITY).to_vector() == std::vector<double>{0, 1000});

    std::vector<double> zero_one = {0, 1};
    CHECK(grad_at({-1000, 1000}, [](const Tensor& t) { return sigmoid(t); }, dt) == std::vector<double>{0, 0});
    CHECK(grad_at({-1000, 1000}, [](const Tensor& t) { return tanh(t); }, dt) == std::vector<double>{0, 0});
    CHECK(grad_at({-1000, 1000}, [](const Tensor& t) { return silu(t); }, dt) == zero_one);
    CHECK(grad_at({-1000, 1000}, [](const Tensor& t) { return elu(t); }, dt) == zero_one);
    CHECK(grad_at({-1000, 1000}, [](const Tensor& t) { return gelu(t); }, dt) == zero_one);
    CHECK(grad_at({-1000, 1000}, [](const Tensor& t) { return gelu(t, GeluForm::Tanh); }, dt) == zero_one);
    CHECK(grad_at({-1000, 1000}, [](const Tensor& t) { return softplus(t); }, dt) == zero_one);
    CHECK(grad_at({-1000, 1000}, [](const Tensor& t) { return softplus(t, 1, INFINITY); }, dt) == zero_one);
  }
}

TEST_CASE("activation: closed-form gradients") {
  // relu: 1 for x > 0, 0 for x < 0
  CHECK(grad_at({-2, -0.5, 0.5, 3}, [](const Tensor& t) { return relu(t); }) == std::vector<double>{0, 0, 1, 1});
  // elu with alpha: alpha exp(x) on the negative side
  auto ge = grad_at({-2, 1}, [](const Tensor& t) { return elu(t, 0.5); });
  CHECK(ge[0] == doctest::Approx(0.5 * std::exp(-2.0)).epsilon(1e-15));
  CHECK(ge[1] == 1);
  // softplus with beta: sigmoid(beta x) below the threshold
  auto gs = grad_at({0.5}, [](const Tensor& t) { return softplus(t, 2, 20); });
  CHECK(gs[0] == doctest::Approx(ref_sigmoid(1.0)).epsilon(1e-15));
}

TEST_CASE("activation: op names") {
  Tensor x = uniform({3}, 1);
  x.set_requires_grad(true);
  CHECK(std::string(gelu(x).grad_fn()->op) == "gelu_erf");
  CHECK(std::string(gelu(x, GeluForm::Tanh).grad_fn()->op) == "gelu_tanh");
  CHECK(std::string(tanh(x).grad_fn()->op) == "tanh");
}

TEST_CASE("activation: errors name the op") {
  Tensor a = zeros({3});
  CHECK_THROWS_WITH(softplus(a, 0), "softplus: beta must be positive and finite, got 0 for input of shape [3]");
  CHECK_THROWS_WITH(softplus(a, -1), "softplus: beta must be positive and finite, got -1 for input of shape [3]");
  Tensor i = zeros({2}, DType::I64);
  CHECK_THROWS_WITH(sigmoid(i), "sigmoid: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
  CHECK_THROWS_WITH(gelu(i, GeluForm::Tanh),
                    "gelu_tanh: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
  CHECK_THROWS_WITH(relu(i), "relu: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
}
