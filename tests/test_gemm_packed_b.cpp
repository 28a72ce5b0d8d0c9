// gemm with B packed once (ops/gemm.h, PackedB): generation's products of a few rows by a weight.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "engine/rng.h"
#include "engine/threadpool.h"
#include "ops/gemm.h"
#include "tests/gradcheck.h"

using namespace eng;

namespace {

// x [M, K] times Wᵀ (W [N, K]), C rows padded by 3 sentinels; with a bias or accumulating onto C.
struct Product {
  std::vector<float> x, xt, w, bias, c;
  GemmArgs<float> g;
  Product(int64_t M, int64_t N, int64_t K, bool with_bias, bool accumulate, uint64_t seed) {
    Rng rng(seed);
    auto fill = [&](std::vector<float>& v, int64_t n) {
      v.resize(size_t(n));
      for (float& e : v) e = float(2 * rng.uniform() - 1);
    };
    fill(x, M * K), fill(w, N * K), fill(bias, N), fill(c, M * (N + 3));
    xt.resize(x.size());
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) xt[size_t(k * M + m)] = x[size_t(m * K + k)];
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = N; j < N + 3; ++j) c[size_t(m * (N + 3) + j)] = 1234.5f;
    g.M = M, g.N = N, g.K = K, g.accumulate = accumulate;
    g.A = x.data(), g.a_rs = K, g.a_cs = 1;
    g.B = w.data(), g.b_rs = 1, g.b_cs = K;
    g.c_rs = N + 3;
    g.bias = with_bias ? bias.data() : nullptr;
  }
  std::vector<float> run(const PackedB* packed, bool a_by_columns = false) const {
    std::vector<float> out = c;
    GemmArgs<float> f = g;
    f.C = out.data();
    if (a_by_columns) f.A = xt.data(), f.a_rs = 1, f.a_cs = g.M;  // a layout that takes gemm's packed kernels
    packed ? gemm(f, *packed) : gemm(f);
    return out;
  }
};

}  // namespace

TEST_CASE("gemm with packed B: the bits of gemm's packed kernels for 3..48 rows, any thread count; padding kept") {
  for (int64_t M : {3, 15, 22, 32, 44, 48})  // AVX-512: 8-row tiles, 14 + 8, 4 x 8, 14 + 14 + 8 + 8
    for (int64_t N : {1, 32, 65, 130})
      for (int64_t K : {1, 7, 401})  // 401: past one k slice of every kernel set
        for (int variant = 0; variant < 3; ++variant) {
          INFO("M ", M, " N ", N, " K ", K, " variant ", variant);
          const Product p(M, N, K, variant == 1, variant == 2, uint64_t(M * 1000 + N * 10 + K + variant));
          const PackedB b = pack_b(p.g);
          const std::vector<float> want = p.run(nullptr, true), got = p.run(&b);
          CHECK(got == want);
          const int saved = num_threads();
          for (int threads : {1, 3}) {  // the split over panels keeps the bits (130 x 401 x 48 is split)
            set_num_threads(threads);
            CHECK(p.run(&b) == want);
          }
          set_num_threads(saved);
          // and the product itself, against the double-precision reference
          std::vector<float> ref = p.c;
          GemmArgs<float> r = p.g;
          r.C = ref.data();
          gemm_reference(r);
          double worst = 0;
          for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, double(std::fabs(ref[i] - got[i])));
          CHECK(worst < 1e-4 * std::sqrt(double(K)));
        }
}

TEST_CASE("gemm with packed B: one or two rows and bf16 products take gemm itself; a wrong shape is refused") {
  for (int64_t M : {1, 2}) {
    const Product p(M, 40, 50, true, false, 3);
    const PackedB b = pack_b(p.g);
    CHECK(p.run(&b) == p.run(nullptr));
  }
  Product p(8, 40, 50, false, false, 4);
  const PackedB b = pack_b(p.g);
  p.g.precision = GemmPrecision::Bf16;
  CHECK(p.run(&b) == p.run(nullptr));
  p.g.precision = GemmPrecision::F32;
  p.g.K = 49;
  CHECK_THROWS_WITH(p.run(&b), "gemm: packed B is 50 x 40, the product needs 49 x 40");
}

TEST_CASE("gemm with packed B: a row map afterwards == the map over gemm's result, padding kept") {
  const RowMap relu = [](const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0 ? 0.f : x[i];
  };
  const int saved = num_threads();
  for (int64_t M : {2, 15, 32})  // gemm itself, then packed A, then A in place
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      const Product p(M, 200, 96, true, false, 40 + uint64_t(M));
      std::vector<float> want = p.run(nullptr), got = p.c;
      for (int64_t m = 0; m < M; ++m) relu(want.data() + m * p.g.c_rs, want.data() + m * p.g.c_rs, p.g.N);
      GemmArgs<float> g = p.g;
      g.C = got.data();
      gemm(g, pack_b(g), relu);
      CHECK(got == want);
    }
  set_num_threads(saved);
}
