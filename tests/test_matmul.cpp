#include "ops/matmul.h"

#include <cmath>
#include <tuple>

#include "engine/error.h"
#include "engine/rng.h"
#include "engine/threadpool.h"
#include "ops/binary.h"
#include "ops/gemm.h"
#include "ops/mixed_precision.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

// C = A·B by the definition, for checking shapes and broadcasting of matmul.
Tensor naive_matmul_2d(const Tensor& a, const Tensor& b) {
  Tensor c = zeros({a.size(0), b.size(1)}, DType::F64);
  for (int64_t i = 0; i < a.size(0); ++i)
    for (int64_t j = 0; j < b.size(1); ++j) {
      double s = 0;
      for (int64_t k = 0; k < a.size(1); ++k) s += a.at({i, k}) * b.at({k, j});
      c.set_at({i, j}, s);
    }
  return c;
}

}  // namespace

GRADCHECK("matmul") {
  check_gradients([](auto v) { return matmul(v[0], v[1]); }, {uniform({3, 4}, 1), uniform({4, 5}, 2)});
  // broadcast batch dims on both sides
  check_gradients([](auto v) { return matmul(v[0], v[1]); }, {uniform({2, 1, 3, 4}, 3), uniform({3, 4, 2}, 4)});
  // transposed operands read through strides
  check_gradients([](auto v) { return matmul(transpose(v[0]), transpose(v[1])); },
                  {uniform({4, 3}, 5), uniform({2, 4}, 6)});
  // vector cases
  check_gradients([](auto v) { return matmul(v[0], v[1]); }, {uniform({4}, 7), uniform({2, 4, 3}, 8)});
  check_gradients([](auto v) { return matmul(v[0], v[1]); }, {uniform({3, 4}, 9), uniform({4}, 10)});
}

TEST_CASE("matmul: values against the definition, including batch broadcasting") {
  Tensor a = uniform({2, 3, 5}, 11), b = uniform({5, 4}, 12);
  Tensor c = matmul(a, b);
  REQUIRE(c.shape() == Shape{2, 3, 4});
  for (int64_t i = 0; i < 2; ++i)
    CHECK(eng::test::allclose(squeeze(narrow(c, 0, i, 1), 0), naive_matmul_2d(squeeze(narrow(a, 0, i, 1), 0), b), 1e-12, 1e-12));
  Tensor d = matmul(uniform({5}, 1), uniform({5}, 2));
  CHECK(d.dim() == 0);
}

TEST_CASE("gemm: blocked kernel == reference on odd sizes, every transpose, 1-3 threads") {
  Rng rng(3);
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 13, 5}, {65, 600, 300}, {3, 1, 257}}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        Tensor A = ta ? transpose(randn({K, M}, rng)) : randn({M, K}, rng);
        Tensor B = tb ? transpose(randn({N, K}, rng)) : randn({K, N}, rng);
        Tensor ref = zeros({M, N}), fast = zeros({M, N});
        GemmArgs<float> g;
        g.M = M, g.N = N, g.K = K;
        g.A = A.data<float>(), g.a_rs = A.strides()[0], g.a_cs = A.strides()[1];
        g.B = B.data<float>(), g.b_rs = B.strides()[0], g.b_cs = B.strides()[1];
        g.c_rs = N;
        g.C = ref.data<float>();
        gemm_reference(g);
        g.C = fast.data<float>();
        gemm(g);
        CHECK(eng::test::max_abs_diff(ref, fast) < 1e-4 * std::sqrt(double(K)));
        for (int threads : {1, 2, 3}) {
          set_num_threads(threads);
          Tensor c = matmul(A, B);
          CHECK(eng::test::max_abs_diff(c, fast) == 0);  // same kernel, rows split differently: bitwise equal
        }
      }
  }
  set_num_threads(2);
}

TEST_CASE("matmul: errors name the op and both shapes") {
  CHECK_THROWS_WITH(matmul(zeros({2, 3}), zeros({4, 5})), "matmul: inner dimensions differ: a [2, 3] · b [4, 5]");
  CHECK_THROWS_WITH(matmul(zeros({2, 2, 3}), zeros({3, 3, 5})),
                    "matmul: shapes [2] and [3] cannot be broadcast together");
  CHECK_THROWS_WITH(matmul(zeros({3}), zeros({4})), "matmul: inner dimensions differ: a [3] · b [4]");
}

GRADCHECK("linear") {
  check_gradients([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                  {uniform({2, 3, 5}, 1), uniform({4, 5}, 2), uniform({4}, 3)});
  check_gradients([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                  {uniform({7, 5}, 4), uniform({3, 5}, 5), uniform({3}, 6)});
}

TEST_CASE("linear: the bias inside the product gives the bits of C filled with it and accumulated, on every path") {
  // 1, 2 rows (dots), 20 (dot blocks on AVX2 and up), 40 and 300 rows (tiles, packed); f32 and bf16 products.
  for (int64_t rows : {1, 2, 20, 40, 300})
    for (GemmPrecision precision : {GemmPrecision::F32, GemmPrecision::Bf16}) {
      const Tensor x = uniform({rows, 70}, 7).to(DType::F32), w = uniform({90, 70}, 8).to(DType::F32);
      const Tensor b = uniform({90}, 9).to(DType::F32);
      Tensor want = empty({rows, 90});
      for (int64_t r = 0; r < rows; ++r) narrow(want, 0, r, 1).copy_from(reshape(b, {1, 90}));
      GemmArgs<float> g;
      g.M = rows, g.N = 90, g.K = 70, g.accumulate = true, g.precision = precision;
      g.A = x.data<float>(), g.a_rs = 70, g.a_cs = 1, g.B = w.data<float>(), g.b_rs = 1, g.b_cs = 70;
      g.C = want.data<float>(), g.c_rs = 90;
      gemm(g);
      INFO("rows ", rows, " bf16 ", precision == GemmPrecision::Bf16);
      Tensor got;
      {
        PrecisionScope scope(precision);
        got = linear(x, w, b);
      }
      CHECK(got.to_vector() == want.to_vector());
      const double tolerance = precision == GemmPrecision::F32 ? 1e-5 : 0.05;
      CHECK(eng::test::max_abs_diff(got, add(matmul(x, transpose(w, 0, 1)), b)) < tolerance);
    }
  GemmArgs<float> g;
  float one = 1;
  g.M = g.N = g.K = 1, g.A = g.B = g.C = &one, g.bias = &one, g.accumulate = true;
  g.a_rs = g.a_cs = g.b_rs = g.b_cs = g.c_rs = 1;
  CHECK_THROWS_WITH_AS(gemm(g), "gemm: a bias starts C, so it cannot be combined with accumulate", Error);
}
