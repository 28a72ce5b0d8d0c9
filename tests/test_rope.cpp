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
  check_gradients([](auto v) { return rope(v[0], 2, 500.0, RopePairing::Interleaved); }, {uniform({2, 3, 5, 6}, 3)});
}

TEST_CASE("rope: interleaved pairing rotates the pairs (2i, 2i + 1); it is rotate-half on permuted dims") {
  Tensor x = uniform({1, 3, 6}, 11);
  Tensor y = rope(x, 1, 1000.0, RopePairing::Interleaved);
  for (int64_t l = 0; l < 3; ++l)
    for (int64_t i = 0; i < 3; ++i) {
      double ang = double(l + 1) * std::pow(1000.0, -2.0 * double(i) / 6.0);
      double a = x.at({0, l, 2 * i}), b = x.at({0, l, 2 * i + 1});
      CHECK(y.at({0, l, 2 * i}) == doctest::Approx(a * std::cos(ang) - b * std::sin(ang)).epsilon(1e-12));
      CHECK(y.at({0, l, 2 * i + 1}) == doctest::Approx(b * std::cos(ang) + a * std::sin(ang)).epsilon(1e-12));
    }
  // Dims (0, 2, 4 | 1, 3, 5) in rotate-half layout are the interleaved pairs: the same rotation.
  const std::vector<int64_t> perm{0, 2, 4, 1, 3, 5};
  Tensor xp = empty({1, 3, 6}, x.dtype());
  for (int64_t l = 0; l < 3; ++l)
    for (int64_t d = 0; d < 6; ++d) xp.set_at({0, l, d}, x.at({0, l, perm[size_t(d)]}));
  Tensor zp = rope(xp, 1, 1000.0, RopePairing::RotateHalf);
  for (int64_t l = 0; l < 3; ++l)
    for (int64_t d = 0; d < 6; ++d) CHECK(zp.at({0, l, d}) == doctest::Approx(y.at({0, l, perm[size_t(d)]})));
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
  CHECK_THROWS_WITH(rope(zeros({2, 4}), 0, 0.0), "rope: base must be positive and finite, got 0");
  CHECK_THROWS_WITH(parse_rope_pairing("pairs"), "rope: pairing must be rotate-half or interleaved, got 'pairs'");
}
