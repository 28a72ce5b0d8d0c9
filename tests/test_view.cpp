#include "ops/view.h"

#include "ops/binary.h"
#include "ops/reduce.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

GRADCHECK("reshape") {
  check_gradients([](auto v) { return reshape(v[0], {3, -1}); }, {uniform({2, 3, 2}, 1)});
  // a non-contiguous input that cannot be viewed: reshape copies, and the gradient still flows
  check_gradients([](auto v) { return reshape(transpose(v[0], 0, 1), {6}); }, {uniform({2, 3}, 2)});
}

GRADCHECK("permute") {
  check_gradients([](auto v) { return mul(permute(v[0], {2, 0, 1}), v[1]); }, {uniform({2, 3, 4}, 1), uniform({4, 2, 3}, 2)});
}

GRADCHECK("slice") {
  check_gradients([](auto v) { return slice(v[0], 1, 1, 5, 2); }, {uniform({3, 6}, 1)});
  check_gradients([](auto v) { return add(narrow(v[0], 0, 1, 2), narrow(v[0], 0, 0, 2)); }, {uniform({3, 2}, 2)});
}

GRADCHECK("expand") {
  check_gradients([](auto v) { return mul(expand(v[0], {2, 3, 4}), v[1]); }, {uniform({3, 1}, 1), uniform({2, 3, 4}, 2)});
}

GRADCHECK("clone") { check_gradients([](auto v) { return transpose(v[0]).contiguous(); }, {uniform({2, 3}, 1)}); }

GRADCHECK("to_dtype") {
  check_gradients([](auto v) { return v[0].to(DType::F32).to(DType::F64); }, {uniform({4}, 1)},
                  {1e-3, 1e-4, 1e-3});  // the f32 round trip costs precision: coarse step and tolerance
}

TEST_CASE("view: views share storage with their base") {
  Tensor a = arange(12, DType::F64);
  Tensor v = reshape(a, {3, 4});
  Tensor t = transpose(v);  // [4, 3], non-contiguous
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.storage().get() == a.storage().get());
  t.set_at({1, 2}, 100);  // element (2, 1) of v = a[9]
  CHECK(a.at({9}) == 100);
  Tensor s = slice(v, 1, 1, 4, 2);  // columns 1 and 3
  CHECK(s.shape() == Shape{3, 2});
  CHECK(s.to_vector() == std::vector<double>{1, 3, 5, 7, 100, 11});
  s.fill(-1);
  CHECK(a.at({3}) == -1);
  Tensor e = expand(reshape(arange(3, DType::F64), {3, 1}), {2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(e.at({1, 2, 3}) == 2);
}

TEST_CASE("view: reshape views when strides allow, copies otherwise") {
  Tensor a = zeros({4, 6});
  Tensor n = narrow(a, 1, 0, 3);  // [4, 3] with row stride 6
  Tensor r = reshape(n, {2, 2, 3});  // splitting the outer dim keeps a view
  CHECK(r.storage().get() == a.storage().get());
  CHECK(r.strides() == Shape{12, 6, 1});
  Tensor c = reshape(n, {12});  // merging across the gap needs a copy
  CHECK(c.storage().get() != a.storage().get());
  CHECK(squeeze(unsqueeze(a, 1), 1).shape() == a.shape());
  CHECK(flatten(zeros({2, 3, 4}), 1).shape() == Shape{2, 12});
}

TEST_CASE("view: errors name the op and the shapes") {
  Tensor a = zeros({2, 3});
  CHECK_THROWS_WITH(reshape(a, {4, 2}), "reshape: input shape [2, 3] (6 elements) does not fit target shape [4, 2]");
  CHECK_THROWS_WITH(expand(a, {2, 4}), "expand: cannot expand shape [2, 3] to [2, 4]");
  CHECK_THROWS_WITH(slice(a, 1, 2, 5), "slice: range [2, 5) out of bounds for axis 1 of shape [2, 3]");
  CHECK_THROWS_WITH(permute(a, {0, 0}), "permute: axis 0 repeated in order [0, 0]");
  CHECK_THROWS_WITH(transpose(a, 0, 2), "transpose: axis 2 out of range for a 2-D tensor");
}

TEST_CASE("view: autograd through views into the base") {
  Tensor a = uniform({2, 3}, 7);
  a.set_requires_grad(true);
  Tensor y = sum(mul(transpose(a), transpose(a)));  // d/da = 2a
  y.backward();
  CHECK(eng::test::allclose(a.grad(), mul_scalar(a.detach(), 2.0)));
}

TEST_CASE("view: repeat_heads gives head h group h / (H / G): a stride-0 view for G = 1, an error if G does not divide H") {
  const Tensor a = uniform({2, 2, 3, 4}, 7);
  const Tensor r = repeat_heads(a, 6);
  REQUIRE(r.shape() == Shape{2, 6, 3, 4});
  for (int64_t h = 0; h < 6; ++h) CHECK(r.at({1, h, 2, 3}) == a.at({1, h / 3, 2, 3}));
  const Tensor one = repeat_heads(narrow(a, 1, 0, 1), 4);
  CHECK(one.strides()[1] == 0);
  CHECK(repeat_heads(a, 2).shape() == a.shape());
  CHECK_THROWS_WITH(repeat_heads(a, 5), "repeat_heads: input must be [B, G, L, D] with G dividing 5, got [2, 2, 3, 4]");
}
