// The bf16 GEMM (ops/gemm.h) against gemm_bf16_reference, bit for bit, at every kernel level this CPU has:
// vdpbf16ps where it has AVX512_BF16, the f32 kernels on rounded panels elsewhere (ENG_CPU=scalar: the
// portable kernel). The reference itself is checked against the exact product of the rounded operands in f64,
// and the rounding (ops/bf16.h) against values written out by hand.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/error.h"
#include "engine/rng.h"
#include "engine/threadpool.h"
#include "ops/bf16.h"
#include "ops/gemm.h"
#include "tests/gradcheck.h"
#include "tests/skip_note.h"

using namespace eng;

namespace {

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512, SimdLevel::Avx512Bf16})
    if (l <= simd_level()) out.push_back(l);
  return out;
}

// A [M, K] and B [K, N], as stored or transposed, rows padded by `pad`; values over many binades, so that the
// pairs' order of addition matters to the bits.
struct Problem {
  std::vector<float> a, b, c;
  GemmArgs<float> g;

  Problem(int64_t M, int64_t N, int64_t K, int layout, uint64_t seed, int64_t pad = 0) {
    const bool ta = layout & 1, tb = layout & 2;
    Rng rng(seed);
    auto fill = [&](std::vector<float>& v, size_t n) {
      v.resize(n);
      for (float& x : v) x = float((2 * rng.uniform() - 1) * std::ldexp(1.0, int(rng.uniform() * 12) - 6));
    };
    fill(a, size_t(M * K + pad * (ta ? K : M)));
    fill(b, size_t(K * N + pad * (tb ? N : K)));
    fill(c, size_t(M * (N + pad)));
    g.M = M, g.N = N, g.K = K, g.accumulate = layout & 4, g.precision = GemmPrecision::Bf16;
    g.A = a.data(), g.a_rs = ta ? 1 : K + pad, g.a_cs = ta ? M + pad : 1;
    g.B = b.data(), g.b_rs = tb ? 1 : N + pad, g.b_cs = tb ? K + pad : 1;
    g.C = c.data(), g.c_rs = N + pad;
  }

  std::vector<float> reference() const {
    std::vector<float> out = c;
    GemmArgs<float> r = g;
    r.C = out.data();
    gemm_bf16_reference(r);
    return out;
  }

  std::vector<float> run(SimdLevel level) const {
    std::vector<float> out = c;
    GemmArgs<float> f = g;
    f.C = out.data();
    gemm(f, level);
    return out;
  }
};

// Elements (as bits) where got and want differ; NaN equals NaN.
int64_t differences(const std::vector<float>& got, const std::vector<float>& want) {
  int64_t n = 0;
  for (size_t i = 0; i < got.size(); ++i)
    n += bits(got[i]) != bits(want[i]) && !(std::isnan(got[i]) && std::isnan(want[i]));
  return n;
}

void check_levels(int64_t M, int64_t N, int64_t K, std::vector<int> layouts = {0, 1, 2, 3, 4, 5, 6, 7},
                  int64_t pad = 0) {
  for (int layout : layouts) {
    const Problem p(M, N, K, layout, uint64_t(M * 7919 + N * 31 + K + layout), pad);
    const std::vector<float> want = p.reference();
    for (SimdLevel level : levels()) {
      INFO("M ", M, " N ", N, " K ", K, " layout ", layout, " pad ", pad, " level ", simd_level_name(level));
      CHECK(differences(p.run(level), want) == 0);
    }
  }
}

}  // namespace

TEST_CASE("bf16: f32 -> bf16 rounds to nearest even; denormals to signed zero; inf stays; NaN stays quiet NaN") {
  CHECK(bf16_from_f32(1.0f) == 0x3F80);
  CHECK(bf16_from_f32(std::ldexp(1.0f, 0) + std::ldexp(1.0f, -8)) == 0x3F80);      // tie, even below
  CHECK(bf16_from_f32(1.0f + std::ldexp(3.0f, -8)) == 0x3F82);                   // tie, even above
  CHECK(bf16_from_f32(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);  // past the tie: up
  CHECK(bf16_from_f32(-1.0f - std::ldexp(1.0f, -9)) == 0xBF80);                  // under half an ulp: down
  CHECK(bf16_from_f32(std::numeric_limits<float>::max()) == 0x7F80);             // rounds past the top: inf
  CHECK(bf16_from_f32(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(bf16_from_f32(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(bf16_from_f32(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(bf16_from_f32(-std::numeric_limits<float>::denorm_min() * 1000) == 0x8000);
  CHECK(bf16_from_f32(std::numeric_limits<float>::min()) == 0x0080);             // the smallest normal stays
  CHECK(bf16_from_f32(from_bits(0x7F800001u)) == 0x7FC0);                        // signalling NaN made quiet
  CHECK(bf16_from_f32(from_bits(0xFFC12345u)) == 0xFFC1);                        // sign and payload's top kept
  CHECK(bf16_round(3.14159265f) == 3.140625f);
}

TEST_CASE("bf16 gemm: the reference is the product of the rounded operands, to f32 accumulation") {
  const Problem p(9, 11, 301, 0, 3);
  const std::vector<float> got = p.reference();
  for (int64_t m = 0; m < p.g.M; ++m)
    for (int64_t n = 0; n < p.g.N; ++n) {
      double exact = 0, terms = 0;
      for (int64_t k = 0; k < p.g.K; ++k) {
        const double t = double(bf16_round(p.g.A[m * p.g.a_rs + k])) * bf16_round(p.g.B[k * p.g.b_rs + n]);
        exact += t, terms += std::fabs(t);
      }
      CHECK(std::fabs(got[size_t(m * p.g.c_rs + n)] - exact) <= double(p.g.K) * 0x1p-24 * terms);
    }
}

TEST_CASE("bf16 gemm: == reference bit for bit on every layout, odd and even K, tile tails, each level") {
  if (simd_level() < SimdLevel::Avx512Bf16)
    eng::test::note_skip(cpu_features().avx512bf16 ? "vdpbf16ps: ENG_CPU caps the level below avx512bf16"
                                                   : "no AVX-512 with AVX512_BF16: vdpbf16ps untested here");
  for (int64_t s = 1; s <= 40; ++s) check_levels(s, 41 - s, 1 + (s * 29) % 40);
  for (int64_t s : {13, 14, 15, 31, 32, 33}) check_levels(s, s, s);
}

TEST_CASE("bf16 gemm: big products (k slices, several jobs and column chunks) and padded operands") {
  for (auto d : {std::vector<int64_t>{200, 300, 1601}, {129, 1030, 70}, {3, 700, 300}})
    check_levels(d[0], d[1], d[2], {0, 3, 5, 6});
  check_levels(33, 47, 19, {0, 1, 2, 3, 4, 5, 6, 7}, 3);
}

TEST_CASE("bf16 gemm: the rounding of packing == bf16_from_f32 on any bit pattern of a finite value") {
  // A · I = bf16(A) exactly: each output is one term a[k] · 1 among zeros, every value passing once through the
  // packing of each level. Exponents stop below the top two binades, which could round to infinity (and
  // infinity · 0 would make the row NaN).
  const int64_t M = 40, K = 64;
  Rng rng(17);
  std::vector<float> a(size_t(M * K)), eye(size_t(K * K), 0.f);
  for (float& x : a) {
    const uint32_t u = rng.next_u32();
    x = from_bits((u & 0x7F800000u) >= 0x7F000000u ? u & ~0x40000000u : u);
  }
  a[0] = std::numeric_limits<float>::denorm_min(), a[1] = -std::numeric_limits<float>::min();
  a[2] = 1.0f + std::ldexp(1.0f, -8), a[3] = 1.0f + std::ldexp(3.0f, -8);
  for (int64_t k = 0; k < K; ++k) eye[size_t(k * K + k)] = 1.f;
  for (SimdLevel level : levels()) {
    std::vector<float> c(size_t(M * K));
    GemmArgs<float> g;
    g.M = M, g.N = K, g.K = K, g.precision = GemmPrecision::Bf16;
    g.A = a.data(), g.a_rs = K, g.a_cs = 1, g.B = eye.data(), g.b_rs = K, g.b_cs = 1, g.C = c.data(), g.c_rs = K;
    gemm(g, level);
    int64_t wrong = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const float want = bf16_round(a[i]);
      wrong += want == 0 ? c[i] != 0 : bits(c[i]) != bits(want);
    }
    INFO("level ", simd_level_name(level));
    CHECK(wrong == 0);
  }
}

TEST_CASE("bf16 gemm: bits equal for 1, 2 and 3 threads") {
  const Problem p(150, 260, 900, 1, 5);
  for (SimdLevel level : levels()) {
    set_num_threads(1);
    const std::vector<float> one = p.run(level);
    for (int threads : {2, 3}) {
      set_num_threads(threads);
      CHECK(p.run(level) == one);
    }
  }
  set_num_threads(2);
}

TEST_CASE("bf16 gemm: K = 0, M = 0, N = 0; an f64 product refuses bf16") {
  for (SimdLevel level : levels())
    for (int layout : {0, 4}) {
      const Problem p(4, 40, 0, layout, 1);
      const std::vector<float> out = p.run(level);
      for (size_t i = 0; i < out.size(); ++i) CHECK(out[i] == (layout ? p.c[i] : 0.f));
      CHECK(Problem(0, 5, 3, layout, 2).run(level).empty());
      const Problem q(5, 0, 3, layout, 2);
      CHECK(q.run(level) == q.c);
    }
  double x = 1, y = 2, z = 0;
  GemmArgs<double> g;
  g.M = g.N = g.K = 1, g.A = &x, g.B = &y, g.C = &z, g.a_rs = g.b_rs = g.c_rs = 1, g.a_cs = g.b_cs = 1;
  g.precision = GemmPrecision::Bf16;
  CHECK_THROWS_WITH_AS(gemm(g), "gemm: a bf16 product takes f32 operands, got f64", Error);
}
