#include "ops/binary.h"

#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

GRADCHECK("add") {
  check_gradients([](auto v) { return add(v[0], v[1]); }, {uniform({3, 4}, 1), uniform({3, 4}, 2)});
  // broadcasting on both sides, and a non-contiguous operand
  check_gradients([](auto v) { return add(v[0], v[1]); }, {uniform({2, 1, 4}, 3), uniform({3, 1}, 4)});
  check_gradients([](auto v) { return add(transpose(v[0], 0, 1), v[1]); }, {uniform({4, 3}, 5), uniform({4}, 6)});
}

GRADCHECK("sub") {
  check_gradients([](auto v) { return sub(v[0], v[1]); }, {uniform({2, 3}, 1), uniform({1, 3}, 2)});
}

GRADCHECK("mul") {
  check_gradients([](auto v) { return mul(v[0], v[1]); }, {uniform({2, 3, 2}, 1), uniform({3, 1}, 2)});
  check_gradients([](auto v) { return mul(v[0], v[0]); }, {uniform({5}, 3)});  // same tensor twice
}

GRADCHECK("div") {
  check_gradients([](auto v) { return div(v[0], v[1]); }, {uniform({2, 3}, 1), uniform({3}, 2, 0.5, 2)});
}

GRADCHECK("pow") {
  check_gradients([](auto v) { return pow(v[0], v[1]); }, {uniform({2, 3}, 1, 0.5, 2), uniform({2, 1}, 2)});
}

GRADCHECK("maximum") {
  check_gradients([](auto v) { return maximum(v[0], v[1]); }, {uniform({4, 3}, 1), uniform({3}, 2)});
}

GRADCHECK("minimum") {
  check_gradients([](auto v) { return minimum(v[0], v[1]); }, {uniform({4, 3}, 1), uniform({4, 1}, 2)});
}

GRADCHECK("add_scalar") { check_gradients([](auto v) { return v[0] + 2.5; }, {uniform({3}, 1)}); }
GRADCHECK("mul_scalar") { check_gradients([](auto v) { return v[0] * -1.5; }, {uniform({3}, 1)}); }
GRADCHECK("pow_scalar") { check_gradients([](auto v) { return pow_scalar(v[0], 2.5); }, {uniform({3}, 1, 0.5, 2)}); }
GRADCHECK("rdiv_scalar") { check_gradients([](auto v) { return 3.0 / v[0]; }, {uniform({3}, 1, 0.5, 2)}); }

TEST_CASE("binary: broadcast values") {
  Tensor a = from_vector(std::vector<double>{1, 2, 3}, {3, 1});
  Tensor b = from_vector(std::vector<double>{10, 20}, {2});
  Tensor c = add(a, b);
  CHECK(c.shape() == Shape{3, 2});
  CHECK(c.to_vector() == std::vector<double>{11, 21, 12, 22, 13, 23});
  CHECK((b - 1.0).to_vector() == std::vector<double>{9, 19});
  CHECK((1.0 - b).to_vector() == std::vector<double>{-9, -19});
  CHECK((b / 2.0).to_vector() == std::vector<double>{5, 10});
}

TEST_CASE("binary: errors name the op and both shapes") {
  Tensor a = zeros({2, 3}), b = zeros({4});
  CHECK_THROWS_WITH(add(a, b), "add: shapes [2, 3] and [4] cannot be broadcast together");
  CHECK_THROWS_WITH(mul(a, zeros({3}, DType::F64)), "mul: dtypes differ (f32 [2, 3] vs f64 [3])");
}
