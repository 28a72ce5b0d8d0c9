#include "ops/norm.h"

#include <cmath>

#include "ops/binary.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

GRADCHECK("layer_norm") {
  check_gradients([](auto v) { return layer_norm(v[0], v[1], v[2]); },
                  {uniform({3, 5}, 1), uniform({5}, 2, 0.5, 1.5), uniform({5}, 3)});
  check_gradients([](auto v) { return layer_norm(v[0], v[1], v[2], 1e-3); },
                  {uniform({2, 3, 4}, 4), uniform({4}, 5), uniform({4}, 6)});
  check_gradients([](auto v) { return layer_norm(v[0], Tensor(), Tensor()); }, {uniform({4, 6}, 7)});
  check_gradients([](auto v) { return layer_norm(v[0], v[1], Tensor()); }, {uniform({4, 3}, 8), uniform({3}, 9)});
  check_gradients([](auto v) { return layer_norm(v[0], Tensor(), v[1]); }, {uniform({4, 3}, 10), uniform({3}, 11)});
  // a transposed (non-contiguous) input
  check_gradients([](auto v) { return layer_norm(transpose(v[0]), v[1], v[2]); },
                  {uniform({5, 3}, 12), uniform({5}, 13), uniform({5}, 14)});
}

GRADCHECK("rms_norm") {
  check_gradients([](auto v) { return rms_norm(v[0], v[1]); }, {uniform({3, 5}, 1), uniform({5}, 2, 0.5, 1.5)});
  check_gradients([](auto v) { return rms_norm(v[0], Tensor(), 1e-3); }, {uniform({2, 3, 4}, 3)});
  check_gradients([](auto v) { return rms_norm(transpose(v[0]), v[1]); }, {uniform({5, 3}, 4), uniform({5}, 5)});
}

TEST_CASE("norm: layer_norm rows have mean 0 and variance 1") {
  for (DType dt : {DType::F64, DType::F32}) {
    // a large common offset: a one-pass variance in f32 would lose it all
    Tensor x = (uniform({6, 64}, 21, -2, 2) + 1000.0).to(dt);
    Tensor y = layer_norm(x, Tensor(), Tensor());
    CHECK(y.dtype() == dt);
    for (int64_t r = 0; r < 6; ++r) {
      double m = 0, v = 0;
      for (int64_t c = 0; c < 64; ++c) m += y.at({r, c}) / 64;
      for (int64_t c = 0; c < 64; ++c) v += (y.at({r, c}) - m) * (y.at({r, c}) - m) / 64;
      CHECK(std::abs(m) < 1e-4);
      CHECK(v == doctest::Approx(1.0).epsilon(1e-3));
    }
  }
}

TEST_CASE("norm: layer_norm with weight and bias, rms_norm, both against naive formulas") {
  Tensor x = uniform({2, 3, 4}, 31, -3, 3), w = uniform({4}, 32), b = uniform({4}, 33);
  Tensor ln = layer_norm(x, w, b, 1e-5), rn = rms_norm(x, w, 1e-6), rn_plain = rms_norm(x, Tensor());
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      double m = 0, var = 0, ms = 0;
      for (int64_t c = 0; c < 4; ++c) m += x.at({i, j, c}) / 4;
      for (int64_t c = 0; c < 4; ++c) var += (x.at({i, j, c}) - m) * (x.at({i, j, c}) - m) / 4;
      for (int64_t c = 0; c < 4; ++c) ms += x.at({i, j, c}) * x.at({i, j, c}) / 4;
      for (int64_t c = 0; c < 4; ++c) {
        double xc = x.at({i, j, c});
        CHECK(ln.at({i, j, c}) == doctest::Approx((xc - m) / std::sqrt(var + 1e-5) * w.at({c}) + b.at({c})));
        CHECK(rn.at({i, j, c}) == doctest::Approx(xc / std::sqrt(ms + 1e-6) * w.at({c})));
        CHECK(rn_plain.at({i, j, c}) == doctest::Approx(xc / std::sqrt(ms + 1e-6)));
      }
    }
  // a non-contiguous input gives the same result as its contiguous copy
  Tensor t = transpose(uniform({4, 3}, 34));
  CHECK(eng::test::allclose(layer_norm(t, w, b), layer_norm(t.contiguous(), w, b), 0, 0));
  CHECK(eng::test::allclose(rms_norm(t, w), rms_norm(t.contiguous(), w), 0, 0));
}

TEST_CASE("norm: the weight and bias gradients sum over every row") {
  // y = xhat * w + b: db is the column sum of g, dw the column sum of g * xhat
  Tensor x = from_vector(std::vector<double>{1, 3, 2, 6}, {2, 2}, DType::F64);  // xhat = [-1, 1] in both rows
  Tensor w = ones({2}, DType::F64).set_requires_grad(), b = zeros({2}, DType::F64).set_requires_grad();
  layer_norm(x, w, b, 0).backward(from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}, DType::F64));
  CHECK(b.grad().to_vector() == std::vector<double>{4, 6});
  CHECK(w.grad().to_vector() == std::vector<double>{-1 - 3, 2 + 4});
  // enough rows and columns for several threads: with w = 1 and b = 0 the output is xhat itself
  Tensor xb = uniform({600, 80}, 41), g = uniform({600, 80}, 42);
  Tensor wb = ones({80}, DType::F64).set_requires_grad(), bb = zeros({80}, DType::F64).set_requires_grad();
  Tensor y = layer_norm(xb, wb, bb);
  y.backward(g);
  CHECK(eng::test::allclose(wb.grad(), sum(mul(g, y.detach()), {0}), 1e-12, 1e-12));
  CHECK(eng::test::allclose(bb.grad(), sum(g, {0}), 1e-12, 1e-12));
}

TEST_CASE("norm: errors name the op and the shapes") {
  Tensor x = zeros({2, 4});
  CHECK_THROWS_WITH(layer_norm(x, zeros({5}), Tensor()),
                    "layer_norm: weight of shape [5] does not match the last dim of input shape [2, 4]");
  CHECK_THROWS_WITH(layer_norm(x, Tensor(), zeros({2, 4})),
                    "layer_norm: bias of shape [2, 4] does not match the last dim of input shape [2, 4]");
  CHECK_THROWS_WITH(rms_norm(x, zeros({2})), "rms_norm: weight of shape [2] does not match the last dim of input shape [2, 4]");
  CHECK_THROWS_WITH(layer_norm(x, zeros({4}, DType::F64), Tensor()), "layer_norm: dtypes differ (f32 [2, 4] vs f64 [4])");
  CHECK_THROWS_WITH(rms_norm(zeros({}), Tensor()), "rms_norm: input must have at least 1 dim, got shape []");
  CHECK_THROWS_WITH(layer_norm(zeros({2, 4}, DType::I64), Tensor(), Tensor()),
                    "layer_norm: i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
}

TEST_CASE("norm: add_layer_norm and add_rms_norm equal the add and the norm, values and gradients") {
  using eng::test::allclose;
  for (DType dt : {DType::F64, DType::F32})
    for (bool rms : {false, true}) {
      INFO(dtype_name(dt), rms ? " rms" : " layer");
      const Tensor x0 = uniform({3, 5, 19}, 31, -2, 2).to(dt), h0 = uniform({3, 5, 19}, 32, -2, 2).to(dt);
      const Tensor w0 = uniform({19}, 33, 0.5, 1.5).to(dt), b0 = uniform({19}, 34).to(dt);
      const Tensor gs = uniform({3, 5, 19}, 35).to(dt), gy = uniform({3, 5, 19}, 36).to(dt);
      std::vector<Tensor> got, want;
      for (bool fused : {true, false}) {
        Tensor x = x0.clone(), h = h0.clone(), w = w0.clone(), b = b0.clone();
        for (Tensor* t : {&x, &h, &w, &b}) t->set_requires_grad(true);
        AddNormResult r;
        if (fused) {
          r = rms ? add_rms_norm(x, h, w) : add_layer_norm(x, h, w, b);
        } else {
          r.sum = add(x, h);
          r.normed = rms ? rms_norm(r.sum, w) : layer_norm(r.sum, w, b);
        }
        // both outputs feed the loss, as in a pre-norm transformer (the sum goes on along the residual path)
        add(sum(mul(r.sum, gs)), sum(mul(r.normed, gy))).backward();
        std::vector<Tensor>& out = fused ? got : want;
        out = {r.sum.detach(), r.normed.detach(), x.grad(), h.grad(), w.grad()};
        if (!rms) out.push_back(b.grad());
      }
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("output ", i);
        CHECK(allclose(got[i], want[i], dt == DType::F32 ? 1e-5 : 1e-13, dt == DType::F32 ? 1e-5 : 1e-13));
      }
    }
  CHECK_THROWS_WITH(add_layer_norm(zeros({2, 4}), zeros({2, 3}), Tensor(), Tensor()),
                    "layer_norm: x of shape [2, 4] and h of shape [2, 3] differ");
}
