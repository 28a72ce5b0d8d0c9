#include "ops/dropout.h"

#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

GRADCHECK("dropout") {
  // a fresh generator per evaluation, so every finite difference sees the same mask
  check_gradients([](auto v) {
    Rng rng(7);
    return dropout(v[0], 0.4, rng);
  }, {uniform({4, 5}, 1)});
  check_gradients([](auto v) {
    Rng rng(8);
    return dropout(transpose(v[0]), 0.5, rng);
  }, {uniform({3, 4}, 2)});
}

TEST_CASE("dropout: a seed reproduces the mask, which matches a serial draw") {
  const int64_t n = 100000;
  const double p = 0.3;
  Rng r1(42), r2(42), r3(43);
  Tensor x = ones({n}, DType::F64);
  auto a = dropout(x, p, r1).to_vector();
  CHECK(r1.position() == uint64_t(n));  // one word per element
  CHECK(dropout(x, p, r2).to_vector() == a);
  CHECK(dropout(x, p, r3).to_vector() != a);
  // the threaded draw equals element i using word i of the stream
  Rng serial(42);
  int64_t mismatches = 0, kept = 0;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double want = serial.uniform() >= p ? 1 / (1 - p) : 0.0;
    mismatches += a[size_t(i)] != want;
    kept += a[size_t(i)] != 0;
    total += a[size_t(i)];
  }
  CHECK(mismatches == 0);
  CHECK(double(kept) / double(n) == doctest::Approx(1 - p).epsilon(0.02));  // sd ~ 0.0015 here
  CHECK(total / double(n) == doctest::Approx(1.0).epsilon(0.02));          // inverted scaling keeps the mean
  // a second call continues the stream: a different mask
  CHECK(dropout(x, p, r1).to_vector() != a);
}

TEST_CASE("dropout: the backward multiplies by the same mask") {
  Tensor x = uniform({50, 40}, 3, 0.5, 1.5);
  x.set_requires_grad(true);
  Rng rng(5);
  Tensor y = dropout(x, 0.5, rng);
  y.backward(ones(y.shape(), DType::F64));
  auto yv = y.to_vector(), xv = x.detach().to_vector(), gv = x.grad().to_vector();
  int64_t zeros_seen = 0, wrong = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    wrong += yv[i] != xv[i] * gv[i] || (gv[i] != 0 && gv[i] != 2.0);  // y = x * mask, grad = mask
    zeros_seen += gv[i] == 0;
  }
  CHECK(wrong == 0);
  CHECK(zeros_seen > 0);
  CHECK(zeros_seen < int64_t(yv.size()));
}

TEST_CASE("dropout: evaluation and p = 0 return the input itself") {
  Tensor x = uniform({10}, 1);
  Rng rng(1);
  CHECK(dropout(x, 0.5, rng, false).impl() == x.impl());
  CHECK(dropout(x, 0.0, rng).impl() == x.impl());
  CHECK(rng.position() == 0);
  CHECK_THROWS_WITH(dropout(x, 1.0, rng), "dropout: p must be in [0, 1), got 1");
  CHECK_THROWS_WITH(dropout(x, -0.25, rng), "dropout: p must be in [0, 1), got -0.25");
  CHECK_THROWS_WITH(dropout(ones({2}, DType::I64), 0.5, rng), "dropout: x must be f32 or f64, got i64 [2]");
}
