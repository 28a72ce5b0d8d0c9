// AVX2/FMA GEMM micro-kernel: a 6 x 16 tile of C in 12 ymm accumulators (with the two B vectors and one
// broadcast, 15 of the 16 registers), 12 FMAs per k step. Built with a target attribute, so the file
// compiles for baseline x86-64 and runs only where the dispatch found AVX2 and FMA.
#include "ops/gemm_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>

#include "ops/gemm_transpose_avx2.h"

namespace eng::gemm_detail {
namespace {

constexpr int kMr = 6, kNr = 16;

template <bool kPackedA>
ENG_AVX2 void tile(int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
                   int64_t ldc, bool load_c) {
  const int64_t rs = kPackedA ? 1 : a_rs, cs = kPackedA ? kMr : a_cs;
  __m256 lo[kMr], hi[kMr];
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
    lo[r] = load_c ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
    hi[r] = load_c ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < K; ++k, a += cs, b += ldb) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
    for (int r = 0; r < kMr; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * rs);
      lo[r] = _mm256_fmadd_ps(av, b0, lo[r]);
      hi[r] = _mm256_fmadd_ps(av, b1, hi[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
    _mm256_storeu_ps(c + r * ldc, lo[r]);
    _mm256_storeu_ps(c + r * ldc + 8, hi[r]);
  }
}

ENG_AVX2 void kernel(int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
                     int64_t ldc, bool load_c) {
  if (a_rs == 1 && a_cs == kMr)
    tile<true>(K, a, a_rs, a_cs, b, ldb, c, ldc, load_c);
  else
    tile<false>(K, a, a_rs, a_cs, b, ldb, c, ldc, load_c);
}

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) of the eight lanes.
ENG_AVX2 inline float lane_sum(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // l0+l4 .. l3+l7
  const __m128 p = _mm_add_ps(h, _mm_movehl_ps(h, h));                                 // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
  return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

// An R x C block of dot products: R + C loads feed R·C independent FMA chains per step of 8 in k.
template <int R, int C>
ENG_AVX2 void dot_block(int64_t K, const float* a, int64_t a_rs, const float* b, int64_t b_cs, float* c, int64_t ldc,
                        bool load_c) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j) acc[r][j] = _mm256_setzero_ps();
  const int64_t K8 = K / 8 * 8;
  for (int64_t k = 0; k < K8; k += 8) {
    __m256 av[R], bv[C];
    for (int r = 0; r < R; ++r) av[r] = _mm256_loadu_ps(a + r * a_rs + k);
    for (int j = 0; j < C; ++j) bv[j] = _mm256_loadu_ps(b + j * b_cs + k);
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < C; ++j) acc[r][j] = _mm256_fmadd_ps(av[r], bv[j], acc[r][j]);
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j) {
      float s = lane_sum(acc[r][j]);
      for (int64_t k = K8; k < K; ++k) s = std::fma(a[r * a_rs + k], b[j * b_cs + k], s);
      float& out = c[r * ldc + j];
      out = load_c ? out + s : s;
    }
}

using DotBlock = void (*)(int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t, bool);

template <int R>
constexpr DotBlock row_of_blocks[kDotNr] = {dot_block<R, 1>, dot_block<R, 2>, dot_block<R, 3>, dot_block<R, 4>};

}  // namespace

static_assert(kDotMr == 3 && kDotNr == 4, "dot_block_avx2's table is written for 3 x 4 blocks");

ENG_AVX2 void dot_block_avx2(int64_t K, const float* a, int64_t a_rs, int64_t rows, const float* b, int64_t b_cs,
                             int64_t cols, float* c, int64_t ldc, bool load_c) {
  static constexpr const DotBlock* table[kDotMr] = {row_of_blocks<1>, row_of_blocks<2>, row_of_blocks<3>};
  table[rows - 1][cols - 1](K, a, a_rs, b, b_cs, c, ldc, load_c);
}

ENG_AVX2 void transpose_avx2(const float* src, int64_t rs, int64_t rows, int64_t width, int64_t kc, float* dst,
                             int64_t ld) {
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    __m256 v[8];
    for (int r = 0; r < 8; ++r) v[r] = r < rows ? _mm256_loadu_ps(src + r * rs + k) : _mm256_setzero_ps();
    transpose8(v);
    for (int i = 0; i < 8; ++i) store_row(dst + (k + i) * ld, v[i], width);
  }
  for (; k < kc; ++k)
    for (int64_t r = 0; r < width; ++r) dst[k * ld + r] = r < rows ? src[r * rs + k] : 0.f;
}

KernelSet<float> avx2_kernels() {
  KernelSet<float> s;
  s.mr = kMr, s.nr = kNr;
  s.kc = 512, s.nc = 128, s.mc = 32 * kMr;  // 12 KiB of A in L1, 256 KiB of B in L2 (tuned on a 512 KiB L2)
  s.kernel = kernel;
  s.transpose = transpose_avx2;
  s.dot_block = dot_block_avx2;
  return s;
}

}  // namespace eng::gemm_detail

#endif  // __x86_64__
