// fast_exp (ops/fast_exp.h) against exp in double: the error bound its header states, and its clamps.
#include <cmath>

#include "ops/fast_exp.h"
#include "tests/gradcheck.h"

TEST_CASE("fast_exp: within 3e-7 relative error on [-87, 88]; 0 below the range, finite above") {
  double worst = 0;
  for (float x = -87.f; x < 88.f; x += 0.00071f) {
    const double want = std::exp(double(x));
    worst = std::max(worst, std::fabs(double(eng::fast_exp(x)) - want) / want);
  }
  CHECK(worst < 3e-7);
  CHECK(eng::fast_exp(-100.f) == 0.f);
  CHECK(std::isfinite(eng::fast_exp(100.f)));
  CHECK(eng::fast_exp(0.f) == 1.f);
  CHECK(eng::fast_exp(-1.0) == std::exp(-1.0));  // f64 stays exact
}
