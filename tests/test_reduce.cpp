#include "ops/reduce.h"

#include <cmath>
#include <limits>

#include "ops/binary.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
Tensor f64(const std::vector<double>& v, const Shape& s) { return from_vector(v, s, DType::F64); }
}  // namespace

GRADCHECK("mean") {
  check_gradients([](auto v) { return mean(v[0], {1}); }, {uniform({2, 3, 4}, 1)});
  check_gradients([](auto v) { return mean(v[0], {0, -1}, true); }, {uniform({2, 3, 4}, 2)});
  check_gradients([](auto v) { return mean(v[0]); }, {uniform({3, 2}, 3)});
  check_gradients([](auto v) { return mean(transpose(v[0], 0, 2), {0}); }, {uniform({2, 3, 4}, 4)});
}

// Random inputs have no ties, so max and min are differentiable at the checked points.
GRADCHECK("max") {
  check_gradients([](auto v) { return max(v[0], {1}); }, {uniform({2, 3, 4}, 1)});
  check_gradients([](auto v) { return max(v[0], {-1, 0}, true); }, {uniform({2, 3, 4}, 2)});
  check_gradients([](auto v) { return max(v[0]); }, {uniform({3, 2}, 3)});
  check_gradients([](auto v) { return max(transpose(v[0]), {1}); }, {uniform({4, 3}, 4)});
}

GRADCHECK("min") {
  check_gradients([](auto v) { return min(v[0], {1}); }, {uniform({2, 3, 4}, 1)});
  check_gradients([](auto v) { return min(v[0], {0, 2}, true); }, {uniform({2, 3, 4}, 2)});
  check_gradients([](auto v) { return min(transpose(v[0]), {-1}); }, {uniform({4, 3}, 3)});
}

TEST_CASE("reduce: mean values, keepdim, multiple and negative axes, non-contiguous") {
  Tensor a = reshape(arange(24, DType::F64), {2, 3, 4});
  CHECK(mean(a).item() == 11.5);
  Tensor m = mean(a, {-1});
  CHECK(m.shape() == Shape{2, 3});
  CHECK(m.to_vector() == std::vector<double>{1.5, 5.5, 9.5, 13.5, 17.5, 21.5});
  Tensor k = mean(a, {0, 2}, true);
  CHECK(k.shape() == Shape{1, 3, 1});
  CHECK(k.to_vector() == std::vector<double>{7.5, 11.5, 15.5});
  Tensor t = transpose(f64({1, 2, 3, 4, 5, 6}, {2, 3}));  // [3, 2], non-contiguous
  CHECK(mean(t, {0}).to_vector() == std::vector<double>{2, 5});
  CHECK(std::isnan(mean(zeros({0})).item()));  // 0 / 0, as in PyTorch
  CHECK(mean(full({1000}, 0.1)).item() == doctest::Approx(0.1).epsilon(1e-7));  // f32 summed in double
}

TEST_CASE("reduce: max and min values, keepdim, multiple and negative axes, non-contiguous") {
  Tensor a = f64({3, -1, 7, 2, 9, -5, 0, 4, 1, 8, -2, 6}, {2, 3, 2});
  CHECK(max(a).item() == 9);
  CHECK(min(a).item() == -5);
  Tensor mx = max(a, {1});
  CHECK(mx.shape() == Shape{2, 2});
  CHECK(mx.to_vector() == std::vector<double>{9, 2, 1, 8});
  Tensor mn = min(a, {0, -1}, true);
  CHECK(mn.shape() == Shape{1, 3, 1});
  CHECK(mn.to_vector() == std::vector<double>{-1, 1, -5});
  Tensor t = transpose(a, 0, 2);
  CHECK_FALSE(t.is_contiguous());
  CHECK(max(t, {2}).to_vector() == std::vector<double>{3, 7, 9, 4, 8, 6});
  CHECK(min(t, {-1}).to_vector() == std::vector<double>{0, 1, -2, -1, 2, -5});
  Tensor f = from_vector(std::vector<double>{-kInf, -kInf, 2.5, -7}, {2, 2}, DType::F32);  // f32, -inf rows stay -inf
  CHECK(max(f, {1}).to_vector() == std::vector<double>{-kInf, 2.5});
  CHECK(min(f, {0}).to_vector() == std::vector<double>{-kInf, -kInf});
}

TEST_CASE("reduce: NaN propagates through max and min and is argmax's pick") {
  Tensor a = f64({1, kNaN, 3, 4, 5, 6}, {2, 3});
  auto mx = max(a, {1}).to_vector(), mn = min(a, {1}).to_vector();
  CHECK(std::isnan(mx[0]));
  CHECK(mx[1] == 6);
  CHECK(std::isnan(mn[0]));
  CHECK(mn[1] == 4);
  CHECK(std::isnan(max(a).item()));
  CHECK(argmax(a, 1).to_vector() == std::vector<double>{1, 2});
  // the gradient of a NaN result goes to the NaN element
  Tensor x = f64({kNaN, 2, 1}, {3}).set_requires_grad();
  max(x).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{1, 0, 0});
}

TEST_CASE("reduce: the gradient of max and min is split evenly among ties") {
  Tensor a = f64({1, 3, 3, 2, 2, 2, 5, 0, -4}, {3, 3}).set_requires_grad();
  max(a, {1}).backward(f64({1, 6, 2}, {3}));
  CHECK(a.grad().to_vector() == std::vector<double>{0, 0.5, 0.5, 2, 2, 2, 2, 0, 0});
  a.zero_grad();
  min(a, {0}, true).backward(f64({4, 1, 1}, {1, 3}));  // column minima 1; 0; -4 with no ties
  CHECK(a.grad().to_vector() == std::vector<double>{4, 0, 0, 0, 0, 0, 0, 1, 1});
  a.zero_grad();
  Tensor b = f64({7, 1, 7, 7}, {2, 2}).set_requires_grad();
  max(b).backward();  // three-way tie over all axes
  auto g = b.grad().to_vector();
  CHECK(g[0] == doctest::Approx(1.0 / 3));
  CHECK(g[1] == 0);
  CHECK(g[2] == doctest::Approx(1.0 / 3));
  CHECK(g[3] == doctest::Approx(1.0 / 3));
  // ties read through a non-contiguous view: the two 2s of column 0 of c share its gradient
  Tensor c = f64({2, 0, 2, 1}, {2, 2}).set_requires_grad();
  max(transpose(c), {1}).backward(f64({10, 10}, {2}));
  CHECK(c.grad().to_vector() == std::vector<double>{5, 0, 5, 10});
}

TEST_CASE("reduce: argmax gives the first index of the maximum as i64") {
  Tensor a = f64({1, 3, 3, 0, 9, 2, 4, 4, 4}, {3, 3});
  Tensor i = argmax(a, 1);
  CHECK(i.dtype() == DType::I64);
  CHECK(i.shape() == Shape{3});
  CHECK(i.to_vector() == std::vector<double>{1, 1, 0});
  Tensor k = argmax(a, -2, true);
  CHECK(k.shape() == Shape{1, 3});
  CHECK(k.to_vector() == std::vector<double>{2, 1, 2});
  CHECK(argmax(transpose(a), 1).to_vector() == std::vector<double>{2, 1, 2});  // non-contiguous
  Tensor f = from_vector(std::vector<double>{-kInf, -kInf, -1e30, -kInf}, {4}, DType::F32);
  CHECK(argmax(f, 0).item() == 2);
  CHECK(argmax(from_vector(std::vector<double>{5, 9, 9}, {3}, DType::I64), 0).item() == 1);
  Tensor r = f64({1, 2}, {2}).set_requires_grad();
  CHECK_FALSE(argmax(r, 0).requires_grad());
}

TEST_CASE("reduce: errors name the op and the shape") {
  CHECK_THROWS_WITH(max(zeros({2, 0}), {1}), "max: cannot reduce over axis 1 of size 0 in shape [2, 0]");
  CHECK_THROWS_WITH(min(zeros({0, 3})), "min: cannot reduce over axis 0 of size 0 in shape [0, 3]");
  CHECK_THROWS_WITH(argmax(zeros({3, 0}), -1), "argmax: cannot reduce over axis 1 of size 0 in shape [3, 0]");
  CHECK(max(zeros({2, 0}), {0}).shape() == Shape{0});  // reducing a non-empty axis of an empty tensor is fine
  CHECK_THROWS_WITH(max(zeros({2, 3}), {1, -1}), "max: repeated axis in [1, -1] for shape [2, 3]");
  CHECK_THROWS_WITH(mean(zeros({2, 3}), {2}), "mean: axis 2 out of range for a 2-D tensor");
  CHECK_THROWS_WITH(argmax(zeros({2, 3}), 2), "argmax: axis 2 out of range for a 2-D tensor");
  CHECK_THROWS_WITH(min(zeros({2}, DType::I64)),
                    "min: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
}
