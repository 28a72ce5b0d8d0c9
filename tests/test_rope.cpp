#include "ops/rope.h"

#include <cmath>

#include "ops/matmul.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

GRADCHECK("rope") {
  check_gradients([](auto v) { return rope(v[0], 3); }, {uniform({2, 3, 5, 4}, 1)});
  check_gradients([](auto v) { return rope(transpose(v[0], 1, 2), 0, 100.0); }, {uniform({2, 5, 3, 6}, 2)});
}

TEST_CASE("rope: rotation by angle p * base^(-2i/D) on the pairs (i, i + D/2)") {
  Tensor x = uniform({1, 3, 4}, 5);
  Tensor y = rope(x, 2);
  for (int64_t l = 0; l < 3; ++l)
    for (int64_t i = 0; i < 2; ++i) {
      double ang = double(l + 2) * std::pow(10000.0, -2.0 * double(i) / 4.0);
      double a = x.at({0, l, i}), b = x.at({0, l, i + 2});
      CHECK(y.at({0, l, i}) == doctest::Approx(a * std::cos(ang) - b * std::sin(ang)).epsilon(1e-12));
      CHECK(y.at({0, l, i + 2}) == doctest::Approx(b * std::cos(ang) + a * std::sin(ang)).epsilon(1e-12));
    }
}

TEST_CASE("rope: an offset equals the same row of a longer sequence; dot products depend on distance only") {
  Tensor x = uniform({1, 6, 8}, 7);
  Tensor full_seq = rope(x, 0);
  Tensor tail = rope(narrow(x, 1, 4, 2), 4);
  CHECK(eng::test::max_abs_diff(tail, narrow(full_seq, 1, 4, 2)) < 1e-12);
  Tensor q = uniform({1, 1, 8}, 8), k = uniform({1, 1, 8}, 9);
  double d1 = matmul(rope(q, 5), transpose(rope(k, 2))).item();
  double d2 = matmul(rope(q, 13), transpose(rope(k, 10))).item();
  CHECK(d1 == doctest::Approx(d2).epsilon(1e-10));
}

TEST_CASE("rope: errors") {
  CHECK_THROWS_WITH(rope(zeros({2, 3})), "rope: input must be [..., L, D] with D even, got [2, 3]");
  CHECK_THROWS_WITH(rope(zeros({2, 4}), -1), "rope: negative offset -1");
}
