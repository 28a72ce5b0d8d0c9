#include "engine/autograd.h"

#include <cmath>
#include <limits>
#include <vector>

#include "engine/anomaly.h"
#include "engine/error.h"
#include "ops/binary.h"
#include "ops/reduce.h"
#include "ops/unary.h"
#include "tests/gradcheck.h"

using namespace eng;

GRADCHECK("sum") {
  eng::test::check_gradients([](auto v) { return sum(v[0], {1}); }, {eng::test::uniform({2, 3, 4}, 1)});
  eng::test::check_gradients([](auto v) { return sum(v[0], {0, 2}, true); }, {eng::test::uniform({2, 3, 4}, 2)});
  eng::test::check_gradients([](auto v) { return sum(v[0]); }, {eng::test::uniform({3, 2}, 3)});
}

TEST_CASE("autograd: a tensor used twice gets both contributions (micrograd's b = a + a; c = b + b)") {
  Tensor a = scalar_tensor(3.0, DType::F64).set_requires_grad();
  Tensor b = a + a;
  Tensor c = b + b;
  c.backward();
  CHECK(c.item() == 12);
  CHECK(a.grad().item() == 4);
}

TEST_CASE("autograd: a leaf's gradient is never a tensor something else holds (the op's own result is kept, no copy)") {
  auto vec = [](std::vector<double> v) { return from_vector(v, {int64_t(v.size())}, DType::F64); };
  Tensor a = vec({1, 2, 3}).set_requires_grad(), b = vec({4, 5, 6}).set_requires_grad();
  const Tensor g = vec({1, -1, 2});
  (a + b).backward(g);  // add may pass one gradient to both inputs
  a.grad().data<double>()[0] = 100;
  CHECK(b.grad().to_vector() == std::vector<double>{1, -1, 2});
  CHECK(g.to_vector() == std::vector<double>{1, -1, 2});
  Tensor c = vec({7, 8, 9}).set_requires_grad();
  c.backward(g);  // a leaf root: the caller's gradient is copied, not taken
  CHECK(c.grad().data<double>() != g.data<double>());
  Tensor d = vec({1, 2, 3}).set_requires_grad();
  (d * d).backward(g);  // mul's fresh gradient becomes d's
  CHECK(d.grad().to_vector() == std::vector<double>{2, -4, 12});
  (d * d).backward(g);  // and later ones add into it
  CHECK(d.grad().to_vector() == std::vector<double>{4, -8, 24});
}

TEST_CASE("autograd: grads accumulate across backward calls until zero_grad") {
  Tensor a = from_vector(std::vector<double>{1, 2}, {2}, DType::F64).set_requires_grad();
  sum(a * a).backward();
  sum(a * 3.0).backward();
  CHECK(a.grad().to_vector() == std::vector<double>{2 + 3, 4 + 3});
  a.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("autograd: backward with an explicit output gradient") {
  Tensor a = from_vector(std::vector<double>{1, 2, 3}, {3}, DType::F64).set_requires_grad();
  Tensor y = a * a;
  y.backward(from_vector(std::vector<double>{1, 0, -1}, {3}, DType::F64));
  CHECK(a.grad().to_vector() == std::vector<double>{2, 0, -6});
  CHECK_THROWS_WITH(y.backward(), "backward: implicit gradient needs a one-element tensor, got shape [3]; "
                                  "pass the output gradient explicitly");
}

TEST_CASE("autograd: the graph is freed by backward unless retained") {
  Tensor a = scalar_tensor(2.0, DType::F64).set_requires_grad();
  Tensor y = a * a;
  y.backward(ones({}, DType::F64), true);
  y.backward(ones({}, DType::F64));
  CHECK(a.grad().item() == 8);
  CHECK_THROWS_WITH(y.backward(), "backward: the graph through op 'mul' was already freed by an earlier backward; "
                                  "pass retain_graph = true to backward twice");
}

TEST_CASE("autograd: no_grad and detach record nothing") {
  Tensor a = scalar_tensor(1.0).set_requires_grad();
  {
    NoGradGuard g;
    Tensor y = a * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
  }
  Tensor d = a.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.storage().get() == a.storage().get());
  CHECK_FALSE((d * 2.0).requires_grad());
  CHECK_THROWS_WITH((d * 2.0).backward(), "backward: tensor of shape [] does not require grad (no input of the "
                                           "computation had requires_grad set)");
}

TEST_CASE("autograd: a deep chain neither overflows the stack in backward nor in destruction") {
  Tensor a = scalar_tensor(1.0, DType::F64).set_requires_grad();
  Tensor y = a;
  for (int i = 0; i < 200000; ++i) y = y * 1.0;
  y.backward();
  CHECK(a.grad().item() == 1);
  Tensor z = a;
  for (int i = 0; i < 200000; ++i) z = z + 0.0;
  z = Tensor();  // dropped without backward: freed iteratively
  CHECK(a.grad().item() == 1);
}

TEST_CASE("autograd: an unregistered op is refused when op checking is on") {
  Tensor a = scalar_tensor(1.0).set_requires_grad();
  CHECK_THROWS_WITH(record(a * 1.0, "not_an_op", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; }),
                    "autograd: op 'not_an_op' records a node but was never registered (ENG_REGISTER_OP)");
}

TEST_CASE("autograd: a wrong gradient shape from a backward is caught") {
  set_op_checking(false);  // a deliberately broken op, not registered
  Tensor a = zeros({2}).set_requires_grad();
  Tensor y = record(a * 1.0, "bad_shape_op_for_test", {a}, [](const Tensor&) {
    return std::vector<Tensor>{zeros({3})};
  });
  CHECK_THROWS_WITH(y.backward(ones({2})), "autograd: op 'bad_shape_op_for_test' returned a gradient of shape [3] "
                                           "for input 0 of shape [2]");
  set_op_checking(true);
}

TEST_CASE("anomaly detection names the op whose output or gradient first turns non-finite") {
  const Tensor x = from_vector(std::vector<double>{1, 0, 4}, {3}).set_requires_grad();
  CHECK(first_nonfinite(x) == -1);
  CHECK(describe_nonfinite(x).empty());
  CHECK(first_nonfinite(from_vector(std::vector<double>{1, 2, std::nan(""), INFINITY}, {2, 2})) == 2);
  CHECK(describe_nonfinite(from_vector(std::vector<double>{1, -INFINITY}, {1, 2})) == "-inf at element 1 of [1, 2]");
  CHECK(log(x).to_vector()[1] == -std::numeric_limits<double>::infinity());  // off: nothing is checked
  set_detect_anomaly(true);
  CHECK_THROWS_WITH(log(x), "anomaly: op 'log' produced -inf at element 1 of [3] from finite inputs");
  // sqrt(0) is finite, its gradient 1/(2 sqrt(0)) is not
  Tensor y = sum(sqrt(x));
  CHECK_THROWS_WITH(y.backward(), "anomaly: the backward of op 'sqrt' produced inf at element 1 of [3] in the "
                                  "gradient of input 0 from a finite output gradient");
  // a NaN that comes in is blamed on its maker, not on every op that reads it
  const Tensor bad = from_vector(std::vector<double>{std::nan(""), 1}, {2}).set_requires_grad();
  CHECK_NOTHROW(mul_scalar(bad, 2.0));
  set_detect_anomaly(false);
}
