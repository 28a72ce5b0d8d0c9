#include "ops/dropout.h"

#include "engine/batch_row.h"
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

TEST_CASE("dropout: a seed reproduces the mask, which matches a serial draw per row") {
  const int64_t rows = 200, cols = 200, n = rows * cols;
  const double p = 0.3;
  Rng r1(42), r2(42), r3(43);
  Tensor x = ones({rows, cols}, DType::F64);
  auto a = dropout(x, p, r1).to_vector();
  CHECK(r1.position() == 1);  // one word per call
  CHECK(dropout(x, p, r2).to_vector() == a);
  CHECK(dropout(x, p, r3).to_vector() != a);
  // the threaded draw equals element j of row r using word j of fork(r) of the stream
  int64_t mismatches = 0, kept = 0;
  double total = 0;
  Rng serial;
  for (int64_t i = 0; i < n; ++i) {
    if (i % cols == 0) serial = Rng(42).fork(uint64_t(i / cols));
    double want = serial.uniform() >= p ? 1 / (1 - p) : 0.0;
    mismatches += a[size_t(i)] != want;
    kept += a[size_t(i)] != 0;
    total += a[size_t(i)];
  }
  CHECK(mismatches == 0);
  CHECK(double(kept) / double(n) == doctest::Approx(1 - p).epsilon(0.02));  // sd ~ 0.0023 here
  CHECK(total / double(n) == doctest::Approx(1.0).epsilon(0.02));          // inverted scaling keeps the mean
  // a second call continues the stream: a different mask
  CHECK(dropout(x, p, r1).to_vector() != a);
}

TEST_CASE("dropout: a batch's mask is the masks of its row-splits, keyed by the global row") {
  const double p = 0.5;
  const Tensor x = ones({6, 3, 5}, DType::F32);
  Rng whole_rng(9);
  const std::vector<double> whole = dropout(x, p, whole_rng).to_vector();
  for (int64_t b : {1, 2, 3}) {
    std::vector<double> parts;
    for (int64_t first = 0; first < 6; first += b) {
      const BatchRowScope scope(first);
      Rng rng(9);  // every micro-batch starts from the step's generator
      const std::vector<double> part = dropout(narrow(x, 0, first, b), p, rng).to_vector();
      CHECK(rng.position() == whole_rng.position());
      parts.insert(parts.end(), part.begin(), part.end());
    }
    CHECK(parts == whole);
  }
  // a row padded longer draws the same mask on its first elements
  Rng short_rng(4), long_rng(4);
  const Tensor s = dropout(ones({2, 7}, DType::F64), p, short_rng), l = dropout(ones({2, 11}, DType::F64), p, long_rng);
  CHECK(narrow(l, 1, 0, 7).contiguous().to_vector() == s.to_vector());
  {
    const BatchRowScope scope(3);
    CHECK(batch_first_row() == 3);
  }
  CHECK(batch_first_row() == 0);
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
