#include "ops/loss.h"

#include <cmath>

#include "engine/allocator.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

Tensor ids(const std::vector<double>& v, const Shape& shape) { return from_vector(v, shape, DType::I64); }

// The textbook formula in f64: mean over kept rows of -sum_j q_j log softmax(x)_j.
double naive_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore, double eps) {
  const int64_t C = logits.shape().back(), N = targets.numel();
  auto x = logits.to_vector(), t = targets.to_vector();
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < N; ++r) {
    if (int64_t(t[size_t(r)]) == ignore) continue;
    double z = 0;
    for (int64_t j = 0; j < C; ++j) z += std::exp(x[size_t(r * C + j)]);
    for (int64_t j = 0; j < C; ++j) {
      double q = (j == int64_t(t[size_t(r)]) ? 1 - eps : 0) + eps / double(C);
      total -= q * std::log(std::exp(x[size_t(r * C + j)]) / z);
    }
    ++count;
  }
  return count ? total / double(count) : 0;
}

}  // namespace

GRADCHECK("cross_entropy") {
  check_gradients([](auto v) { return cross_entropy(v[0], v[1]); }, {uniform({4, 5}, 1, -2, 2)}, {},
                  {ids({0, 4, 2, 4}, {4})});
  // [B, T, C] with an ignored position and label smoothing
  check_gradients([](auto v) { return cross_entropy(v[0], v[1], -1, 0.2); }, {uniform({2, 3, 4}, 2, -2, 2)}, {},
                  {ids({3, -1, 0, 1, 1, 2}, {2, 3})});
  // non-contiguous logits and a custom ignore_index that is also a valid class id
  check_gradients([](auto v) { return cross_entropy(transpose(v[0]), v[1], 2, 0.1); }, {uniform({3, 4}, 3, -2, 2)},
                  {}, {ids({2, 0, 1, 2}, {4})});
}

TEST_CASE("loss: cross_entropy matches -log softmax in f64") {
  struct Case {
    Shape shape;
    std::vector<double> targets;
    int64_t ignore;
    double eps;
  };
  std::vector<Case> cases = {
      {{3, 4}, {0, 3, 1}, -100, 0.0},
      {{3, 4}, {0, -100, 1}, -100, 0.0},
      {{2, 2, 5}, {4, 0, 7, 2}, 7, 0.3},
      {{6, 3}, {2, 2, 2, 0, 1, 1}, -100, 1.0},
  };
  uint64_t seed = 10;
  for (const Case& c : cases) {
    Tensor logits = uniform(c.shape, seed++, -3, 3);
    Tensor targets = ids(c.targets, Shape(c.shape.begin(), c.shape.end() - 1));
    double want = naive_cross_entropy(logits, targets, c.ignore, c.eps);
    CHECK(cross_entropy(logits, targets, c.ignore, c.eps).item() == doctest::Approx(want).epsilon(1e-12));
    Tensor l32 = logits.to(DType::F32);
    Tensor y32 = cross_entropy(l32, targets, c.ignore, c.eps);
    CHECK(y32.dtype() == DType::F32);
    CHECK(y32.item() == doctest::Approx(want).epsilon(1e-5));
  }
}

TEST_CASE("loss: cross_entropy over many rows (threaded) matches the reference") {
  Tensor logits = uniform({3000, 37}, 5, -4, 4);
  std::vector<double> t(3000);
  for (size_t i = 0; i < t.size(); ++i) t[i] = i % 11 == 0 ? -100 : double((i * 13) % 37);
  Tensor targets = ids(t, {3000});
  CHECK(cross_entropy(logits, targets, -100, 0.05).item() ==
        doctest::Approx(naive_cross_entropy(logits, targets, -100, 0.05)).epsilon(1e-10));
}

TEST_CASE("loss: cross_entropy is stable for large logits and 0 when every row is ignored") {
  Tensor big = from_vector(std::vector<double>{1000, 0, -1000, 999}, {2, 2}, DType::F32);
  Tensor y = cross_entropy(big, ids({0, 1}, {2}));
  // row 0: log(1 + e^-1000) ~ 0; row 1: log(e^-1000 + e^999) - 999 ~ 0
  CHECK(std::isfinite(y.item()));
  CHECK(y.item() == doctest::Approx(0.0));

  Tensor x = uniform({3, 4}, 1);
  x.set_requires_grad(true);
  Tensor none = cross_entropy(x, ids({-100, -100, -100}, {3}));
  CHECK(none.item() == 0);
  none.backward();
  CHECK(x.grad().to_vector() == std::vector<double>(12, 0.0));
}

TEST_CASE("loss: cross_entropy gradient is (softmax - smoothed target) / count") {
  Tensor x = zeros({2, 4}, DType::F64);  // uniform softmax: 1/4 everywhere
  x.set_requires_grad(true);
  cross_entropy(x, ids({1, -100}, {2}), -100, 0.2).backward();
  // kept row: 0.25 - (0.8 [j == 1] + 0.05); one kept row, so count = 1
  auto g = x.grad().to_vector();
  std::vector<double> want = {0.2, -0.6, 0.2, 0.2, 0, 0, 0, 0};
  for (size_t i = 0; i < want.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]));
}

TEST_CASE("loss: cross_entropy errors name the op, the value and the class count") {
  Tensor x = zeros({2, 5});
  CHECK_THROWS_WITH(cross_entropy(x, ids({0, 5}, {2})),
                    "cross_entropy: target 5 out of range [0, 5) for logits of shape [2, 5] (ignore_index is -100)");
  CHECK_THROWS_WITH(cross_entropy(x, ids({-1, 0}, {2})),
                    "cross_entropy: target -1 out of range [0, 5) for logits of shape [2, 5] (ignore_index is -100)");
  CHECK_THROWS_WITH(cross_entropy(x, ids({0, 1, 2}, {3})),
                    "cross_entropy: targets of shape [3] do not match logits of shape [2, 5] without its class axis");
  CHECK_THROWS_WITH(cross_entropy(x, zeros({2})), "cross_entropy: targets must be i64, got f32 [2]");
  CHECK_THROWS_WITH(cross_entropy(x, ids({0, 1}, {2}), -100, 1.5),
                    "cross_entropy: label_smoothing must be in [0, 1], got 1.5");
  CHECK_THROWS_WITH(cross_entropy(scalar_tensor(1), ids({0}, {})),
                    "cross_entropy: logits of shape [] need a class axis");
}

GRADCHECK("linear_cross_entropy") {
  // chunks of 1, 2 (a ragged last chunk) and all rows; with and without bias; ignored rows and label smoothing
  const Tensor t = ids({3, 0, -100, 4, 1}, {5});
  for (int64_t chunk : {1, 2, 5})
    check_gradients([chunk](auto v) { return linear_cross_entropy(v[0], v[1], v[2], v[3], chunk, -100, 0.1); },
                    {uniform({5, 3}, 1, -2, 2), uniform({6, 3}, 2), uniform({6}, 3)}, {}, {t});
  check_gradients([](auto v) { return linear_cross_entropy(v[0], v[1], Tensor(), v[2], 2); },
                  {uniform({2, 2, 3}, 4, -2, 2), uniform({5, 3}, 5)}, {}, {ids({0, 4, 2, 1}, {2, 2})});
}

TEST_CASE("loss: linear_cross_entropy == cross_entropy(x wᵀ + b) in value and gradients, in less memory") {
  const Tensor x0 = uniform({6, 4}, 6, -2, 2).to(DType::F32), w0 = uniform({9, 4}, 7).to(DType::F32),
               b0 = uniform({9}, 8).to(DType::F32);
  const Tensor t = ids({8, 0, 3, -100, 5, 5}, {6});
  Tensor x1 = x0.clone().set_requires_grad(), w1 = w0.clone().set_requires_grad(), b1 = b0.clone().set_requires_grad();
  Tensor x2 = x0.clone().set_requires_grad(), w2 = w0.clone().set_requires_grad(), b2 = b0.clone().set_requires_grad();
  const Tensor fused = linear_cross_entropy(x1, w1, b1, t, 4, -100, 0.05);
  const Tensor plain = cross_entropy(add(matmul(x2, transpose(w2, 0, 1)), b2), t, -100, 0.05);
  CHECK(fused.item() == doctest::Approx(plain.item()).epsilon(1e-6));
  fused.backward();
  plain.backward();
  CHECK(eng::test::allclose(x1.grad(), x2.grad(), 1e-5, 1e-6));
  CHECK(eng::test::allclose(w1.grad(), w2.grad(), 1e-5, 1e-6));
  CHECK(eng::test::allclose(b1.grad(), b2.grad(), 1e-5, 1e-6));

  // 2048 rows over 4096 classes: the plain form holds the 32 MiB logits (and as much again for their
  // gradient); chunks of 128 rows hold 2 MiB at a time.
  const Tensor xs = uniform({2048, 16}, 9).to(DType::F32).set_requires_grad(),
               ws = uniform({4096, 16}, 10).to(DType::F32).set_requires_grad();
  const Tensor ts = zeros({2048}, DType::I64);
  auto peak_of = [&](auto f) {
    allocator::empty_cache();
    allocator::reset_peak();
    const size_t before = allocator::stats().live_bytes;
    f().backward();
    return allocator::stats().peak_bytes - before;
  };
  const size_t chunked = peak_of([&] { return linear_cross_entropy(xs, ws, Tensor(), ts, 128); });
  const size_t whole = peak_of([&] { return cross_entropy(matmul(xs, transpose(ws, 0, 1)), ts); });
  INFO("peak extra memory: chunked ", chunked >> 20, " MiB, whole logits ", whole >> 20, " MiB");
  CHECK(whole >= size_t(32) << 20);
  CHECK(chunked < size_t(6) << 20);
}

TEST_CASE("loss: linear_cross_entropy refuses mismatched shapes, dtypes and chunk sizes") {
  const Tensor x = uniform({3, 4}, 11), w = uniform({5, 4}, 12), t = ids({0, 1, 2}, {3});
  CHECK_THROWS_WITH(linear_cross_entropy(x, uniform({5, 3}, 13), Tensor(), t, 2),
                    "linear_cross_entropy: x [3, 4] and weight [5, 3] do not fit (weight is [C, d])");
  CHECK_THROWS_WITH(linear_cross_entropy(x, w, uniform({4}, 14), t, 2),
                    "linear_cross_entropy: bias [4] does not match weight [5, 4]");
  CHECK_THROWS_WITH(linear_cross_entropy(x, w, Tensor(), ids({0, 1}, {2}), 2),
                    "linear_cross_entropy: targets i64 [2] must be i64 of shape [3]");
  CHECK_THROWS_WITH(linear_cross_entropy(x, w, Tensor(), t, 0), "linear_cross_entropy: chunk must be >= 1, got 0");
  CHECK_THROWS_WITH(linear_cross_entropy(x, w, Tensor(), ids({0, 7, 2}, {3}), 2),
                    "linear_cross_entropy: target 7 out of range [0, 5) for logits of shape [3, 5] (ignore_index is "
                    "-100)");
  CHECK_THROWS_WITH(linear_cross_entropy(x.to(DType::F32), w, Tensor(), t, 2),
                    "linear_cross_entropy: x, weight and bias must share one floating dtype, got f32, f64");
}
