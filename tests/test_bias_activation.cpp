#include "ops/bias_activation.h"

#include <cmath>
#include <string>

#include "engine/threadpool.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::allclose;
using eng::test::check_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

const BiasActivation kActs[] = {BiasActivation::None, BiasActivation::Relu, BiasActivation::GeluErf,
                                BiasActivation::GeluTanh};

// The unfused composition the op replaces: add, then the activation of ops/activation.h.
Tensor unfused(const Tensor& x, const Tensor& bias, BiasActivation act) {
  // x * 1 is x, but as a node: the reference stays differentiable when there is neither bias nor activation
  Tensor h = bias.defined() ? add(x, bias) : x * 1.0;
  switch (act) {
    case BiasActivation::None: return h;
    case BiasActivation::Relu: return relu(h);
    case BiasActivation::GeluErf: return gelu(h, GeluForm::Erf);
    case BiasActivation::GeluTanh: return gelu(h, GeluForm::Tanh);
  }
  return h;
}

struct Run {
  Tensor y, dx, db;
};

// Output and gradients of f(x, bias) under the output gradient w, on fresh leaves.
template <class F>
Run run(F f, const Tensor& x0, const Tensor& b0, const Tensor& w) {
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor b = b0.defined() ? b0.clone().set_requires_grad(true) : Tensor();
  Tensor y = f(x, b);
  y.backward(w);
  return {y.detach(), x.grad(), b.defined() ? b.grad() : Tensor()};
}

}  // namespace

GRADCHECK("bias_activation") {
  for (BiasActivation act : kActs) {
    auto f = [act](auto v) { return bias_activation(v[0], v[1], act); };
    check_gradients(f, {uniform({3, 5}, 1, -3, 3), uniform({5}, 2)});
    check_gradients(f, {uniform({2, 3, 4}, 3, -3, 3), uniform({4}, 4)});
    check_gradients([act](auto v) { return bias_activation(transpose(v[0], 0, 1), v[1], act); },
                    {uniform({5, 3}, 5, -3, 3), uniform({5}, 6)});  // strided input
    check_gradients([act](auto v) { return bias_activation(v[0], Tensor(), act); }, {uniform({3, 5}, 7, -3, 3)});
  }
}

TEST_CASE("bias_activation: f64 equals the unfused add and activation") {
  Tensor x = uniform({4, 9}, 11, -3, 3), b = uniform({9}, 12);
  for (BiasActivation act : kActs) {
    CHECK(allclose(bias_activation(x, b, act), unfused(x, b, act), 1e-15, 1e-15));
    CHECK(allclose(bias_activation(x, Tensor(), act), unfused(x, Tensor(), act), 1e-15, 1e-15));
  }
}

TEST_CASE("bias_activation: f32 output and gradients equal the unfused composition") {
  for (const Shape& shape : {Shape{3, 5, 17}, Shape{2, 33}}) {
    const int64_t C = shape.back();
    Tensor x = uniform(shape, 21, -3, 3).to(DType::F32);
    Tensor w = uniform(shape, 22).to(DType::F32);
    for (const Tensor& b : {uniform({C}, 23).to(DType::F32), Tensor()}) {
      for (BiasActivation act : kActs) {
        CAPTURE(C);
        CAPTURE(int(act));
        CAPTURE(b.defined());
        Run fused = run([act](auto xi, auto bi) { return bias_activation(xi, bi, act); }, x, b, w);
        Run ref = run([act](auto xi, auto bi) { return unfused(xi, bi, act); }, x, b, w);
        CHECK(fused.y.dtype() == DType::F32);
        CHECK(allclose(fused.y, ref.y, 1e-6, 1e-7));
        CHECK(allclose(fused.dx, ref.dx, 1e-6, 1e-7));
        if (b.defined()) CHECK(allclose(fused.db, ref.db, 1e-6, 1e-7));
      }
    }
  }
}

TEST_CASE("bias_activation: results do not depend on the thread count") {
  // 600 columns: three column blocks of the bias gradient; 130 rows: three runs of the f32 row sums
  const Shape shape{130, 600};
  Tensor x = uniform(shape, 31, -3, 3).to(DType::F32);
  Tensor b = uniform({600}, 32).to(DType::F32);
  Tensor w = uniform(shape, 33).to(DType::F32);
  const int saved = num_threads();
  std::vector<Run> runs;
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    runs.push_back(run([](auto xi, auto bi) { return bias_activation(xi, bi, BiasActivation::GeluErf); }, x, b, w));
  }
  set_num_threads(saved);
  CHECK(max_abs_diff(runs[1].y, runs[0].y) == 0);
  CHECK(max_abs_diff(runs[1].dx, runs[0].dx) == 0);
  CHECK(max_abs_diff(runs[1].db, runs[0].db) == 0);
  // and the bias gradient is the column sum of dx, within the rounding bound of a float run of 64 rows
  const std::vector<double> dx = runs[0].dx.to_vector(), db = runs[0].db.to_vector();
  for (int64_t c = 0; c < 600; ++c) {
    double want = 0, magnitude = 0;
    for (int64_t r = 0; r < 130; ++r) {
      want += dx[size_t(r * 600 + c)];
      magnitude += std::abs(dx[size_t(r * 600 + c)]);
    }
    CHECK(std::abs(db[size_t(c)] - want) <= 64 * 0x1p-24 * magnitude);
  }
}

TEST_CASE("bias_activation: records one node and skips a bias that needs no gradient") {
  Tensor x = uniform({2, 3}, 41).set_requires_grad(true);
  Tensor b = uniform({3}, 42);
  Tensor y = bias_activation(x, b, BiasActivation::Relu);
  CHECK(std::string(y.grad_fn()->op) == "bias_activation");
  y.backward(ones({2, 3}, DType::F64));
  CHECK(x.grad().defined());
  CHECK_FALSE(b.grad().defined());
}

TEST_CASE("bias_activation: errors name the op and the shapes") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH(bias_activation(x, zeros({4}), BiasActivation::Relu),
                    "bias_activation: bias of shape [4] does not match input of shape [2, 3] (expected [x.size(-1)])");
  CHECK_THROWS_WITH(bias_activation(x, zeros({1, 3}), BiasActivation::None), doctest::Contains("bias_activation"));
  CHECK_THROWS_WITH(bias_activation(x, zeros({3}, DType::F64), BiasActivation::GeluErf),
                    "bias_activation: dtypes differ (x f32 [2, 3], bias f64 [3])");
  CHECK_THROWS_WITH(bias_activation(zeros({2}, DType::I64), Tensor(), BiasActivation::None),
                    "bias_activation: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
}
