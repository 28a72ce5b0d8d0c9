// ExactSquares (engine/exact_norm.h) against a long-double sum of the same squares, and against itself over
// other orders and groupings, which must give the same bits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/exact_norm.h"
#include "engine/rng.h"

using namespace eng;

namespace {

// Values over the whole f32 range: subnormals, tiny, ordinary and huge magnitudes, both signs.
std::vector<float> wide_values(size_t n) {
  Rng rng(7);
  std::vector<float> v(n);
  for (float& x : v) {
    const double exponent = -149.0 + rng.uniform() * 276.0;  // 2^-149 .. 2^127
    x = float((rng.uniform() < 0.5 ? -1 : 1) * std::ldexp(1.0 + rng.uniform(), int(exponent)));
  }
  return v;
}

double sum_of(const std::vector<float>& v) {
  ExactSquares s;
  s.add(v.data(), v.size());
  return s.value();
}

}  // namespace

TEST_CASE("exact squares: the same bits in any order and any grouping") {
  std::vector<float> v = wide_values(3001);
  const double whole = sum_of(v);
  std::reverse(v.begin(), v.end());
  const double reversed = sum_of(v);
  CHECK(std::memcmp(&whole, &reversed, sizeof whole) == 0);
  ExactSquares a, b, c;
  a.add(v.data(), 1000);
  b.add(v.data() + 1000, 1);
  c.add(v.data() + 1001, 2000);
  c.merge(a);
  c.merge(b);
  const double merged = c.value();
  CHECK(std::memcmp(&whole, &merged, sizeof whole) == 0);
}

TEST_CASE("exact squares: equal to a long-double sum where that is exact enough, non-finite passed on") {
  std::vector<float> v(2000);
  Rng rng(3);
  for (float& x : v) x = float(rng.normal());
  long double ref = 0;
  for (float x : v) ref += (long double)x * (long double)x;
  CHECK(sum_of(v) == doctest::Approx(double(ref)).epsilon(1e-15));
  CHECK(sum_of({3.0f, 4.0f}) == 25.0);
  CHECK(sum_of({0.0f, -0.0f}) == 0.0);
  CHECK(sum_of({std::numeric_limits<float>::denorm_min()}) == std::ldexp(1.0, -298));
  CHECK(sum_of({std::numeric_limits<float>::max()}) ==
        double(std::numeric_limits<float>::max()) * double(std::numeric_limits<float>::max()));
  CHECK(std::isinf(sum_of({1.0f, std::numeric_limits<float>::infinity()})));
  CHECK(std::isnan(sum_of({1.0f, std::numeric_limits<float>::quiet_NaN()})));
}
