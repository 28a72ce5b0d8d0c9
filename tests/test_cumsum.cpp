#include "ops/cumsum.h"

#include <cmath>
#include <limits>
#include <vector>

#include "ops/binary.h"
#include "ops/select.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::allclose;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

// The scan written out for a contiguous [rows, cols] tensor along axis 0 or 1.
std::vector<double> naive_cumsum_2d(const std::vector<double>& x, int64_t rows, int64_t cols, int64_t axis,
                                    bool reverse) {
  std::vector<double> out(x.size());
  const int64_t lines = axis == 0 ? cols : rows, n = axis == 0 ? rows : cols;
  for (int64_t l = 0; l < lines; ++l) {
    double acc = 0;
    for (int64_t k = 0; k < n; ++k) {
      int64_t i = reverse ? n - 1 - k : k;
      size_t at = size_t(axis == 0 ? i * cols + l : l * cols + i);
      acc += x[at];
      out[at] = acc;
    }
  }
  return out;
}

}  // namespace

GRADCHECK("cumsum") {
  check_gradients([](auto v) { return cumsum(v[0], 1); }, {uniform({3, 5}, 1)});
  check_gradients([](auto v) { return cumsum(v[0], 0, true); }, {uniform({3, 5}, 2)});
  check_gradients([](auto v) { return cumsum(v[0], 1); }, {uniform({3, 5, 7}, 3)});  // middle axis
  check_gradients([](auto v) { return cumsum(v[0], -1, true); }, {uniform({3, 1, 5}, 4)});
  // non-contiguous input, scanning along either of its axes
  check_gradients([](auto v) { return cumsum(transpose(v[0]), 0); }, {uniform({5, 3}, 5)});
  check_gradients([](auto v) { return cumsum(transpose(v[0]), 1, true); }, {uniform({5, 3}, 6)});
}

TEST_CASE("cumsum: values along each axis, both directions, f32 and f64") {
  for (DType dt : {DType::F32, DType::F64}) {
    CAPTURE(dtype_name(dt));
    Tensor a = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, dt);
    Tensor c0 = cumsum(a, 0);
    CHECK(c0.dtype() == dt);
    CHECK(c0.shape() == Shape{2, 3});
    CHECK(c0.to_vector() == std::vector<double>{1, 2, 3, 5, 7, 9});
    CHECK(cumsum(a, 1).to_vector() == std::vector<double>{1, 3, 6, 4, 9, 15});
    CHECK(cumsum(a, -1).to_vector() == std::vector<double>{1, 3, 6, 4, 9, 15});
    CHECK(cumsum(a, 1, true).to_vector() == std::vector<double>{6, 5, 3, 15, 11, 6});
    CHECK(cumsum(a, 0, true).to_vector() == std::vector<double>{5, 7, 9, 4, 5, 6});
    // transposed input [3, 2]: rows are (1, 4), (2, 5), (3, 6)
    Tensor t = transpose(a);
    CHECK(cumsum(t, 0).to_vector() == std::vector<double>{1, 4, 3, 9, 6, 15});
    CHECK(cumsum(t, 1).to_vector() == std::vector<double>{1, 5, 2, 7, 3, 9});
    CHECK(cumsum(t, 1).is_contiguous());
  }
}

TEST_CASE("cumsum: strided and broadcast inputs") {
  Tensor a = reshape(arange(12, DType::F64), {3, 4});
  Tensor s = slice(a, 1, 1, 4, 2);  // columns 1 and 3: [[1, 3], [5, 7], [9, 11]]
  CHECK(cumsum(s, 0).to_vector() == std::vector<double>{1, 3, 6, 10, 15, 21});
  Tensor e = expand(reshape(arange(3, DType::F64), {3, 1}), {3, 2});  // stride 0 along the scanned axis
  CHECK(cumsum(e, 1).to_vector() == std::vector<double>{0, 0, 1, 2, 2, 4});
}

TEST_CASE("cumsum: large tensors match the written-out scan") {
  const int64_t rows = 301, cols = 97;  // enough lines to be split over the thread pool
  Tensor x = uniform({rows, cols}, 9);
  auto xv = x.to_vector();
  for (int64_t axis : {0, 1})
    for (bool reverse : {false, true}) {
      CAPTURE(axis);
      CAPTURE(reverse);
      Tensor want = from_vector(naive_cumsum_2d(xv, rows, cols, axis, reverse), {rows, cols}, DType::F64);
      CHECK(allclose(cumsum(x, axis, reverse), want, 1e-13, 1e-13));
      CHECK(allclose(cumsum(x.to(DType::F32), axis, reverse), want, 1e-5, 1e-5));
    }
}

TEST_CASE("cumsum: scalar and empty tensors") {
  Tensor s = scalar_tensor(2.5, DType::F64);
  CHECK(cumsum(s, 0).shape() == Shape{});
  CHECK(cumsum(s, -1).item() == 2.5);
  Tensor z = zeros({0, 3});
  CHECK(cumsum(z, 0).shape() == Shape{0, 3});
  CHECK(cumsum(z, 1).numel() == 0);
}

TEST_CASE("cumsum: backward is the reverse scan of the gradient") {
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 4}, {4}, DType::F64);
  x.set_requires_grad(true);
  Tensor w = from_vector(std::vector<double>{1, 10, 100, 1000}, {4}, DType::F64);
  cumsum(x, 0).backward(w);
  CHECK(x.grad().to_vector() == std::vector<double>{1111, 1110, 1100, 1000});
  x.zero_grad();
  cumsum(x, 0, true).backward(w);
  CHECK(x.grad().to_vector() == std::vector<double>{1, 11, 111, 1111});
}

TEST_CASE("cumsum: errors name the op") {
  CHECK_THROWS_WITH(cumsum(zeros({2, 3}), 2), "cumsum: axis 2 out of range for a 2-D tensor");
  CHECK_THROWS_WITH(cumsum(zeros({2, 3}), -3), "cumsum: axis -3 out of range for a 2-D tensor");
  CHECK_THROWS_WITH(cumsum(scalar_tensor(1), 1), "cumsum: axis 1 out of range for a 0-D tensor");
  CHECK_THROWS_WITH(cumsum(zeros({2}, DType::I64), 0),
                    "cumsum: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
}

GRADCHECK("logcumsumexp") {
  check_gradients([](auto v) { return logcumsumexp(v[0], 1); }, {uniform({3, 5}, 11, -3, 3)});
  check_gradients([](auto v) { return logcumsumexp(v[0], 0); }, {uniform({4, 3, 2}, 12, -3, 3)});
  check_gradients([](auto v) { return logcumsumexp(transpose(v[0]), 1); }, {uniform({6, 3}, 13, -3, 3)});
  // −inf entries (as the causal Sinkhorn balancing has): their gradient is 0 and nothing turns into NaN; a line
  // that starts with −inf has −inf outputs, zeroed here so that the finite differences stay finite.
  const Tensor in_mask = from_vector(std::vector<double>{1, 0, 1, 0, 0, 1, 1, 0, 0, 1}, {2, 5}, DType::I64);
  const Tensor out_mask = from_vector(std::vector<double>{1, 0, 0, 0, 0, 1, 1, 0, 0, 0}, {2, 5}, DType::I64);
  check_gradients(
      [&](auto v) {
        const double inf = std::numeric_limits<double>::infinity();
        return masked_fill(logcumsumexp(masked_fill(v[0], in_mask, -inf), 1), out_mask, 0.0);
      },
      {uniform({2, 5}, 14, -3, 3)});
}

TEST_CASE("logcumsumexp: equals log(cumsum(exp)), without overflow, −inf entries skipped") {
  Tensor x = uniform({7, 33}, 15, -5, 5);
  const auto xv = x.to_vector();
  std::vector<double> want(xv.size());
  for (int64_t r = 0; r < 7; ++r) {
    double s = 0;
    for (int64_t c = 0; c < 33; ++c) {
      s += std::exp(xv[size_t(r * 33 + c)]);
      want[size_t(r * 33 + c)] = std::log(s);
    }
  }
  const Tensor w = from_vector(want, {7, 33}, DType::F64);
  CHECK(allclose(logcumsumexp(x, 1), w, 1e-13, 1e-13));
  CHECK(allclose(logcumsumexp(x.to(DType::F32), -1), w, 1e-6, 1e-6));
  CHECK(allclose(logcumsumexp(transpose(x), 0), transpose(w), 1e-13, 1e-13));
  // exp(1000) overflows; the scan does not
  CHECK(allclose(logcumsumexp(add_scalar(x, 1000.0), 1), add_scalar(w, 1000.0), 1e-13, 1e-10));

  const double inf = std::numeric_limits<double>::infinity();
  const Tensor y = logcumsumexp(from_vector(std::vector<double>{-inf, -inf, 0, -inf, 1}, {5}, DType::F64), 0);
  const auto yv = y.to_vector();
  CHECK(yv[0] == -inf);
  CHECK(yv[1] == -inf);
  CHECK(yv[2] == 0);
  CHECK(yv[3] == 0);
  CHECK(yv[4] == doctest::Approx(std::log(1 + std::exp(1.0))).epsilon(1e-14));
  CHECK(std::isnan(logcumsumexp(from_vector(std::vector<double>{0, NAN, 0}, {3}, DType::F64), 0).to_vector()[2]));
}

TEST_CASE("logcumsumexp: the gradient stays finite at −inf and at large values") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = from_vector(std::vector<double>{-inf, 500, 501, -inf, 499}, {5}, DType::F64);
  x.set_requires_grad(true);
  logcumsumexp(x, 0).backward(ones({5}, DType::F64));
  const auto g = x.grad().to_vector();
  CHECK(g[0] == 0);
  CHECK(g[3] == 0);
  // out = [−inf, 500, L2, L2, L4]: Σ_i ∂out_i/∂x_j over i >= j, softmax weights of x_j within each prefix
  const double l2 = 501 + std::log1p(std::exp(-1.0)), l4 = l2 + std::log1p(std::exp(499 - l2));
  CHECK(g[1] == doctest::Approx(1 + 2 * std::exp(500 - l2) + std::exp(500 - l4)).epsilon(1e-12));
  CHECK(g[4] == doctest::Approx(std::exp(499 - l4)).epsilon(1e-12));
  double total = 0;
  for (double v : g) total += v;
  CHECK(total == doctest::Approx(4).epsilon(1e-12));  // each finite output's weights sum to 1
}

TEST_CASE("logcumsumexp: errors name the op") {
  CHECK_THROWS_WITH(logcumsumexp(zeros({2, 3}), 2), "logcumsumexp: axis 2 out of range for a 2-D tensor");
  CHECK_THROWS_WITH(logcumsumexp(zeros({2}, DType::I64), 0),
                    "logcumsumexp: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
}
