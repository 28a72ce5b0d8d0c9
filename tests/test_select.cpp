#include "ops/select.h"

#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

Tensor ids(const std::vector<double>& v, const Shape& shape) { return from_vector(v, shape, DType::I64); }

}  // namespace

GRADCHECK("masked_fill") {
  // an i64 mask broadcast over rows
  check_gradients([](auto v) { return masked_fill(v[0], v[1], -3.0); }, {uniform({3, 4}, 1)}, {},
                  {ids({1, 0, 0, 1}, {1, 4})});
  // a floating mask of x's dtype, on a non-contiguous x
  check_gradients([](auto v) { return masked_fill(transpose(v[0]), v[1], 0.5); }, {uniform({4, 3}, 2)}, {},
                  {from_vector(std::vector<double>{0, 1, 1, 0, 0, 1, 0, 0, 1, 1, 1, 0}, {3, 4}, DType::F64)});
}

GRADCHECK("where") {
  // cond, a and b all broadcast: both a and b need their gradients summed back
  check_gradients([](auto v) { return where(v[2], v[0], v[1]); }, {uniform({3, 1}, 1), uniform({4}, 2)}, {},
                  {ids({1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1}, {3, 4})});
  check_gradients([](auto v) { return where(v[2], transpose(v[0]), v[1]); }, {uniform({4, 3}, 3), uniform({3, 4}, 4)},
                  {}, {from_vector(std::vector<double>{1, 0, 0, 1}, {1, 4}, DType::F64)});
}

TEST_CASE("select: masked_fill and where values") {
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(masked_fill(x, ids({0, 1, 0}, {3}), -1).to_vector() == std::vector<double>{1, -1, 3, 4, -1, 6});
  CHECK(masked_fill(x, ids({1, 0}, {2, 1}), 9).to_vector() == std::vector<double>{9, 9, 9, 4, 5, 6});
  Tensor c = ids({1, 0}, {2, 1});
  Tensor b = from_vector(std::vector<double>{-1, -2, -3}, {3});
  CHECK(where(c, x, b).to_vector() == std::vector<double>{1, 2, 3, -1, -2, -3});
  CHECK(where(ids({0, 7, 0}, {3}), b, scalar_tensor(0)).to_vector() == std::vector<double>{0, -2, 0});
  // the cond shape may widen the result beyond both a and b
  CHECK(where(c, scalar_tensor(1), scalar_tensor(2)).shape() == Shape{2, 1});
}

TEST_CASE("select: gradients go to the chosen side only") {
  Tensor a = uniform({2, 3}, 1), b = uniform({3}, 2), x = uniform({2, 3}, 3);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  x.set_requires_grad(true);
  Tensor c = ids({1, 0, 1, 0, 0, 1}, {2, 3});
  where(c, a, b).backward(ones({2, 3}, DType::F64));
  CHECK(a.grad().to_vector() == std::vector<double>{1, 0, 1, 0, 0, 1});
  CHECK(b.grad().to_vector() == std::vector<double>{1, 2, 0});
  masked_fill(x, c, 5).backward(full({2, 3}, 2, DType::F64));
  CHECK(x.grad().to_vector() == std::vector<double>{0, 2, 0, 2, 2, 0});
}

TEST_CASE("select: the threaded contiguous path matches the definition") {
  const int64_t n = 50000;
  Tensor a = uniform({n}, 1), b = uniform({n}, 2);
  std::vector<double> cv(n);
  for (int64_t i = 0; i < n; ++i) cv[size_t(i)] = double((i * 7919) % 3 == 0);
  auto out = where(from_vector(cv, {n}, DType::F64), a, b).to_vector(), av = a.to_vector(), bv = b.to_vector();
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += out[size_t(i)] != (cv[size_t(i)] != 0 ? av[size_t(i)] : bv[size_t(i)]);
  CHECK(wrong == 0);
}

TEST_CASE("select: errors name the op and the shapes") {
  Tensor x = zeros({3});
  CHECK_THROWS_WITH(masked_fill(x, ids({1, 0, 1, 0, 1, 0}, {2, 3}), 0),
                    "masked_fill: mask of shape [2, 3] cannot be broadcast to x of shape [3]");
  CHECK_THROWS_WITH(masked_fill(x, ids({1, 0}, {2}), 0),
                    "masked_fill: mask of shape [2] cannot be broadcast to x of shape [3]");
  CHECK_THROWS_WITH(masked_fill(x, zeros({3}, DType::F64), 0), "masked_fill: mask must be i64 or f32, got f64 [3]");
  CHECK_THROWS_WITH(masked_fill(ids({1}, {1}), ids({1}, {1}), 0), "masked_fill: x must be f32 or f64, got i64 [1]");
  CHECK_THROWS_WITH(where(ids({1, 0}, {2}), x, x), "where: shapes [2] and [3] cannot be broadcast together");
  CHECK_THROWS_WITH(where(ids({1}, {1}), x, zeros({3}, DType::F64)), "where: dtypes differ (f32 [3] vs f64 [3])");
  CHECK_THROWS_WITH(where(zeros({3}, DType::F64), x, x), "where: cond must be i64 or f32, got f64 [3]");
}
