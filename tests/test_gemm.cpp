// The packed GEMM (ops/gemm.h) against gemm_reference: every transpose layout, sizes 1..70 and the tails of
// every register tile, products big enough to be sliced, blocked and threaded, padded and batched operands,
// at each SIMD level this CPU has (ENG_CPU lowers that set: ENG_CPU=scalar tests the portable kernel only).
//
// Tolerance: an f32 multiply-add chain over K terms (plus the initial C) errs by at most
// (K + 1) u Σ|terms| with u = 2^-24 (Higham's γ bound), twice that without fused multiply-add (the portable
// kernel rounds the product too); the reference adds one rounding of its own. We allow (2K + 4) u Σ|terms|,
// which no indexing mistake stays under.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/rng.h"
#include "engine/threadpool.h"
#include "ops/gemm.h"
#include "ops/gemm_kernels.h"
#include "ops/matmul.h"
#include "ops/view.h"
#include "tests/gradcheck.h"
#include "tests/skip_note.h"

using namespace eng;

namespace {

struct Dims {
  int64_t M, N, K;
};

std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512})
    if (l <= simd_level()) out.push_back(l);
  return out;
}

// A [M, K] and B [K, N] stored as themselves or transposed, rows padded by `pad` elements, and C [M, N] with
// rows padded too; the padding holds a sentinel that must survive.
template <class T>
struct Problem {
  std::vector<T> a, b, c;
  GemmArgs<T> g;
  static constexpr T kSentinel = T(1234.5);

  Problem(int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool accumulate, uint64_t seed, int64_t pad = 0) {
    Rng rng(seed);
    auto fill = [&](std::vector<T>& v, size_t n) {
      v.resize(n);
      for (T& x : v) x = T(2 * rng.uniform() - 1);
    };
    fill(a, size_t(M * K + pad * (ta ? K : M)));
    fill(b, size_t(K * N + pad * (tb ? N : K)));
    fill(c, size_t(M * (N + pad)));
    g.M = M, g.N = N, g.K = K, g.accumulate = accumulate;
    g.A = a.data(), g.a_rs = ta ? 1 : K + pad, g.a_cs = ta ? M + pad : 1;
    g.B = b.data(), g.b_rs = tb ? 1 : N + pad, g.b_cs = tb ? K + pad : 1;
    g.C = c.data(), g.c_rs = N + pad;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = N; n < N + pad; ++n) c[size_t(m * g.c_rs + n)] = kSentinel;
  }

  // Runs gemm on a copy of C and returns the largest error relative to the tolerance above (<= 1 passes);
  // a touched padding element counts as a failure.
  double check(SimdLevel level) const {
    std::vector<T> want = c, got = c;
    GemmArgs<T> r = g, f = g;
    r.C = want.data(), f.C = got.data();
    gemm_reference(r);
    gemm(f, level);
    const double u = std::is_same<T, float>::value ? 0x1p-24 : 0x1p-53;
    double worst = 0;
    for (int64_t m = 0; m < g.M; ++m) {
      for (int64_t n = 0; n < g.N; ++n) {
        double terms = g.accumulate ? std::fabs(double(c[size_t(m * g.c_rs + n)])) : 0;
        for (int64_t k = 0; k < g.K; ++k)
          terms += std::fabs(double(g.A[m * g.a_rs + k * g.a_cs]) * g.B[k * g.b_rs + n * g.b_cs]);
        const size_t i = size_t(m * g.c_rs + n);
        const double err = std::fabs(double(got[i]) - double(want[i])), tol = (2 * double(g.K) + 4) * u * terms;
        worst = std::max(worst, err == 0 ? 0 : tol == 0 ? 1e30 : err / tol);
      }
      for (int64_t n = g.N; n < g.c_rs; ++n)
        if (got[size_t(m * g.c_rs + n)] != kSentinel) worst = 1e30;
    }
    return worst;
  }

  std::vector<T> run(SimdLevel level) const {
    std::vector<T> out = c;
    GemmArgs<T> f = g;
    f.C = out.data();
    gemm(f, level);
    return out;
  }
};

// Layout bits: 1 A transposed, 2 B transposed, 4 accumulate.
void check_layouts(Dims d, int64_t pad = 0, std::vector<int> layouts = {0, 1, 2, 3, 4, 5, 6, 7}) {
  for (SimdLevel level : levels())
    for (int layout : layouts) {
      const bool ta = layout & 1, tb = layout & 2, acc = layout & 4;
      Problem<float> p(d.M, d.N, d.K, ta, tb, acc, uint64_t(d.M * 10007 + d.N * 101 + d.K + layout), pad);
      INFO("M ", d.M, " N ", d.N, " K ", d.K, " A", ta ? "ᵀ" : "", " B", tb ? "ᵀ" : "", acc ? " accumulate" : "",
           " pad ", pad, " level ", simd_level_name(level));
      CHECK(p.check(level) <= 1);
    }
}

// p's product gives the same bits on 1, 2 and 3 threads, and split into blocks of 10 rows or of 50 columns.
void check_same_bits(const Problem<float>& p, SimdLevel level) {
  set_num_threads(1);
  const std::vector<float> one = p.run(level);
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    CHECK(p.run(level) == one);
  }
  set_num_threads(2);
  std::vector<float> rows = p.c, cols = p.c;
  for (int64_t m0 = 0; m0 < p.g.M; m0 += 10) {
    GemmArgs<float> g = p.g;
    g.M = std::min<int64_t>(10, p.g.M - m0), g.A += m0 * g.a_rs, g.C = rows.data() + m0 * g.c_rs;
    gemm(g, level);
  }
  for (int64_t n0 = 0; n0 < p.g.N; n0 += 50) {
    GemmArgs<float> g = p.g;
    g.N = std::min<int64_t>(50, p.g.N - n0), g.B += n0 * g.b_cs, g.C = cols.data() + n0;
    gemm(g, level);
  }
  CHECK(rows == one);
  CHECK(cols == one);
}

}  // namespace

TEST_CASE("gemm: == reference on every layout, sizes 1..70, accumulate on and off, each SIMD level") {
  for (int64_t s = 1; s <= 70; ++s) check_layouts({s, 71 - s, 1 + (s * 29) % 70});
  for (int64_t s : {1, 2, 5, 6, 7, 13, 14, 15, 16, 17, 31, 32, 33, 48, 64, 65}) check_layouts({s, s, s});
}

TEST_CASE("gemm: big products: k slices, row and column blocks, edge tiles, several jobs") {
  for (Dims d : {Dims{200, 300, 600}, {129, 1030, 70}, {9, 700, 300}, {70, 5, 2000}})
    check_layouts(d, 0, {0, 3, 5, 6});  // each transpose once, accumulate on and off
}

TEST_CASE("gemm: long K on few rows (unpacked path in k slices)") {
  for (SimdLevel level : levels())
    for (Dims d : {Dims{3, 40, 5000}, {20, 33, 4500}}) {
      Problem<float> p(d.M, d.N, d.K, false, level == SimdLevel::Avx2, true, 7);
      INFO("M ", d.M, " N ", d.N, " K ", d.K, " level ", simd_level_name(level));
      CHECK(p.check(level) <= 1);
    }
}

#if defined(__x86_64__)
TEST_CASE("gemm: the transposing packs of the x86 kernel sets (A and Bᵀ panels) == the plain loop") {
  std::vector<gemm_detail::KernelSet<float>> sets;
  if (simd_level() >= SimdLevel::Avx2) sets.push_back(gemm_detail::avx2_kernels());
  if (simd_level() >= SimdLevel::Avx512) sets.push_back(gemm_detail::avx512_kernels());
  Rng rng(9);
  std::vector<float> src(16 * 40);
  for (float& x : src) x = float(rng.uniform());
  for (const auto& ks : sets) {
    const int64_t tr = ks.transpose_rows;  // 8 (AVX2) or 16 (AVX-512); widths as the panels of mr and nr use
    for (int64_t width : {tr, tr - 2, int64_t(3)})
      for (int64_t rows = 0; rows <= width; ++rows)
        for (int64_t kc : {1, 7, 8, 9, 15, 16, 17, 21, 33}) {
          const int64_t ld = width + 5;
          std::vector<float> got(size_t(kc * ld + 1), -1.f), want = got;
          ks.transpose(src.data(), 40, rows, width, kc, got.data(), ld);
          for (int64_t k = 0; k < kc; ++k)
            for (int64_t r = 0; r < width; ++r) want[size_t(k * ld + r)] = r < rows ? src[size_t(r * 40 + k)] : 0.f;
          INFO("transpose rows ", tr, " width ", width, " rows ", rows, " kc ", kc);
          CHECK(got == want);  // and nothing written outside the panel's columns
        }
  }
}

// The AVX-512 tiles (14 x 32 and 8 x 32) on the same panels give every element as the fma chain in k order from
// C: the scalar loop below, bit for bit, with A packed (the short tile's own panels) and in place.
TEST_CASE("gemm: the AVX-512 tiles of 14 and 8 rows == the scalar fma chain, bit for bit") {
  if (simd_level() < SimdLevel::Avx512) {
    eng::test::note_skip("no AVX-512 (or ENG_CPU caps it): the AVX-512 tiles untested here");
    return;
  }
  const gemm_detail::KernelSet<float> ks = gemm_detail::avx512_kernels();
  REQUIRE(ks.mr_short == 8);
  Rng rng(12);
  const int64_t K = 37, nr = ks.nr, lda = K + 3;
  std::vector<float> a(size_t(ks.mr * lda)), b(size_t(K * nr)), c0(size_t(ks.mr * nr));
  for (auto* v : {&a, &b, &c0})
    for (float& x : *v) x = float(2 * rng.uniform() - 1);
  for (const auto& tile : {std::pair{ks.mr, ks.kernel}, std::pair{ks.mr_short, ks.kernel_short}})
    for (bool packed : {false, true})
      for (bool load_c : {false, true}) {
        const int64_t mr = tile.first;  // not a structured binding: clang's C++17 cannot capture one (INFO)
        const auto kernel = tile.second;
        std::vector<float> ap(size_t(mr * K));  // the packed panel: element (r, k) at k * mr + r
        for (int64_t k = 0; k < K; ++k)
          for (int64_t r = 0; r < mr; ++r) ap[size_t(k * mr + r)] = a[size_t(r * lda + k)];
        std::vector<float> got = c0, want = c0;
        kernel(K, packed ? ap.data() : a.data(), packed ? 1 : lda, packed ? mr : 1, b.data(), nr, got.data(), nr,
               load_c);
        for (int64_t r = 0; r < mr; ++r)
          for (int64_t j = 0; j < nr; ++j) {
            float acc = load_c ? c0[size_t(r * nr + j)] : 0.f;
            for (int64_t k = 0; k < K; ++k) acc = std::fma(a[size_t(r * lda + k)], b[size_t(k * nr + j)], acc);
            want[size_t(r * nr + j)] = acc;
          }
        INFO("rows ", mr, packed ? " packed" : " in place", load_c ? " from C" : " from 0");
        CHECK(got == want);  // rows past mr untouched too
      }
}
#endif

TEST_CASE("gemm: padded rows (strided operands) leave C's padding untouched") {
  for (Dims d : {Dims{5, 7, 3}, {33, 47, 19}, {100, 90, 80}}) check_layouts(d, 3);
}

TEST_CASE("gemm: K = 0 gives C = 0 or leaves C, M = 0 or N = 0 does nothing") {
  for (SimdLevel level : levels())
    for (bool acc : {false, true}) {
      Problem<float> p(4, 40, 0, false, false, acc, 1);
      std::vector<float> out = p.run(level);
      for (size_t i = 0; i < out.size(); ++i) CHECK(out[i] == (acc ? p.c[i] : 0.f));
      for (auto [M, N] : {std::pair<int64_t, int64_t>{0, 5}, {5, 0}}) {
        Problem<float> q(M, N, 3, false, false, acc, 2);
        CHECK(q.run(level) == q.c);
      }
    }
}

TEST_CASE("gemm: f64 == reference") {
  for (Dims d : {Dims{1, 1, 1}, {7, 13, 5}, {65, 70, 300}, {150, 40, 90}})
    for (int layout = 0; layout < 8; ++layout) {
      Problem<double> p(d.M, d.N, d.K, layout & 1, layout & 2, layout & 4, uint64_t(layout + 3));
      CHECK(p.check(simd_level()) <= 1);
    }
}

// Packed B holds 2^22 values at most: with 2048 columns, fewer than 2100 rows fit, so K is cut in two slabs;
// 17000 columns do not fit one k slice, so N is cut in chunks. These products are checked through the bits:
// row blocks of 10 take the unpacked path, which the reference checks above cover. (Layout 2, x·Bᵀ, is left
// out: its blocks of 10 rows take the dot-block path, whose bits differ from the tiles'; see ops/gemm.h.)
TEST_CASE("gemm: bits equal for 1, 2 and 3 threads and for any split into row or column blocks") {
  const std::vector<std::pair<Dims, std::vector<int>>> cases = {
      {{210, 150, 520}, {0, 1, 3, 5, 7}}, {{57, 2048, 2100}, {0}}, {{57, 17000, 24}, {7}},
      {{96, 140, 160}, {0, 3}}};  // the last unpacked at every size (AVX-512: in_place_work), and threaded
  for (SimdLevel level : levels())
    for (const auto& c : cases)
      for (int layout : c.second) {
        const Dims d = c.first;
        INFO("M ", d.M, " N ", d.N, " K ", d.K, " level ", simd_level_name(level), " layout ", layout);
        check_same_bits(Problem<float>(d.M, d.N, d.K, layout & 1, layout & 2, layout & 4, uint64_t(layout)), level);
      }
}

TEST_CASE("gemm: x·Wᵀ with 3..48 rows (dot blocks): bits equal for any thread count and any row or column split") {
  for (SimdLevel level : levels())
    for (bool accumulate : {false, true}) {
      INFO("level ", simd_level_name(level), " accumulate ", accumulate);
      const Problem<float> p(48, 1030, 301, false, true, accumulate, 11);
      CHECK(p.check(level) <= 1);
      check_same_bits(p, level);  // blocks of 10 rows: 3 x 4 blocks then a 1-row edge; of 50 columns: a 2-column edge
    }
}

TEST_CASE("matmul: a Linear layer on [B, 1, d] is one product of B rows, equal to the rows one by one") {
  // broadcast_strides gives the size-1 axis stride 0; the B items must still merge into one product
  Rng rng(9);
  const Tensor x = randn({32, 1, 256}, rng), w = randn({768, 256}, rng);
  const Tensor y = matmul(x, transpose(w, 0, 1));
  for (int64_t b : {0, 7, 31}) {
    const Tensor want = matmul(narrow(x, 0, b, 1), transpose(w, 0, 1));
    CHECK(eng::test::max_abs_diff(narrow(y, 0, b, 1), want) < 1e-4);
  }
}

TEST_CASE("matmul: batched and broadcast operands == gemm_reference per item, merged or not") {
  auto item = [](const Tensor& t, int64_t i) { return squeeze(narrow(t, 0, i, 1), 0); };
  Rng rng(5);
  const int64_t M = 37, K = 29, N = 45;
  Tensor w = randn({K, N}, rng), wt = transpose(randn({N, K}, rng));
  Tensor x = randn({4, M, K}, rng), xs = narrow(randn({4, M + 3, K}, rng), 1, 0, M);  // xs: rows not M apart
  Tensor bw = randn({4, K, N}, rng);
  Tensor xt = transpose(randn({4, K, M}, rng));
  for (auto [a, b] : {std::pair<Tensor, Tensor>{x, w}, {x, wt}, {xs, w}, {x, bw}, {xt, bw}}) {
    Tensor c = matmul(a, b);
    for (int64_t i = 0; i < 4; ++i) {
      Tensor ai = item(a, i), bi = b.dim() == 3 ? item(b, i) : b, want = zeros({M, N});
      GemmArgs<float> g;
      g.M = M, g.N = N, g.K = K;
      g.A = ai.data<float>(), g.a_rs = ai.strides()[0], g.a_cs = ai.strides()[1];
      g.B = bi.data<float>(), g.b_rs = bi.strides()[0], g.b_cs = bi.strides()[1];
      g.C = want.data<float>(), g.c_rs = N;
      gemm_reference(g);
      CHECK(eng::test::max_abs_diff(item(c, i), want) < 1e-5);
    }
  }
}
