// AVX-512 GEMM micro-kernel: a 14 x 32 tile of C in 28 zmm accumulators. Each k step loads one row of
// the B panel (two zmm) and broadcasts 14 values of A, for 28 FMAs: enough independent chains to keep
// both FMA pipes busy through their latency, with two registers to spare. Built with a target
// attribute, so the file compiles for baseline x86-64 and runs only where the dispatch found AVX-512.
#include "ops/gemm_kernels.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers self-initialise their "undefined" registers, which its -Wuninitialized reports
// once they are inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#define ENG_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace eng::gemm_detail {
namespace {

constexpr int kMr = 14, kNr = 32;

template <bool kPackedA>
ENG_AVX512 void tile(int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
                     int64_t ldc, bool load_c) {
  const int64_t rs = kPackedA ? 1 : a_rs, cs = kPackedA ? kMr : a_cs;
  __m512 lo[kMr], hi[kMr];
#pragma GCC unroll 16
  for (int r = 0; r < kMr; ++r) {
    lo[r] = load_c ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
    hi[r] = load_c ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < K; ++k, a += cs, b += ldb) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 16
    for (int r = 0; r < kMr; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * rs]);
      lo[r] = _mm512_fmadd_ps(av, b0, lo[r]);
      hi[r] = _mm512_fmadd_ps(av, b1, hi[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kMr; ++r) {
    _mm512_storeu_ps(c + r * ldc, lo[r]);
    _mm512_storeu_ps(c + r * ldc + 16, hi[r]);
  }
}

ENG_AVX512 void kernel(int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
                       int64_t ldc, bool load_c) {
  if (a_rs == 1 && a_cs == kMr)
    tile<true>(K, a, a_rs, a_cs, b, ldb, c, ldc, load_c);
  else
    tile<false>(K, a, a_rs, a_cs, b, ldb, c, ldc, load_c);
}

// Rows v[0..15] of 16 floats become columns: pairs of rows interleave, then 4 x 4 blocks within 128-bit
// lanes, then the lanes themselves in two rounds of 4 x 4: 64 shuffles for 256 values (the AVX2 8 x 8 takes 96).
ENG_AVX512 inline void transpose16(__m512 (&v)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);      // per lane: r0k0 r1k0 r0k1 r1k1
    t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);  // per lane: r0k2 r1k2 r0k3 r1k3
  }
  for (int h = 0; h < 4; ++h) {  // rows 4h .. 4h+3; v[4h + c] lane L: those rows at k = 4L + c
    v[4 * h] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    v[4 * h + 1] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    v[4 * h + 2] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    v[4 * h + 3] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {  // column 4L + c gathers lane L of v[c], v[4 + c], v[8 + c], v[12 + c]
    const __m512 u0 = _mm512_shuffle_f32x4(v[c], v[4 + c], 0x88), u1 = _mm512_shuffle_f32x4(v[c], v[4 + c], 0xDD);
    const __m512 u2 = _mm512_shuffle_f32x4(v[8 + c], v[12 + c], 0x88);
    const __m512 u3 = _mm512_shuffle_f32x4(v[8 + c], v[12 + c], 0xDD);
    t[c] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    t[8 + c] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
    t[4 + c] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) v[i] = t[i];
}

// Up to 16 rows at a time, 16 values of k per step; the k tail by masked loads, so no element is read twice.
ENG_AVX512 void transpose(const float* src, int64_t rs, int64_t rows, int64_t width, int64_t kc, float* dst,
                          int64_t ld) {
  const __mmask16 store = __mmask16((1u << width) - 1);
  for (int64_t k = 0; k < kc; k += 16) {
    const int64_t n = std::min<int64_t>(16, kc - k);
    const __mmask16 load = __mmask16((1u << n) - 1);
    __m512 v[16];
    for (int r = 0; r < 16; ++r) v[r] = r < rows ? _mm512_maskz_loadu_ps(load, src + r * rs + k) : _mm512_setzero_ps();
    transpose16(v);
    for (int64_t i = 0; i < n; ++i) _mm512_mask_storeu_ps(dst + (k + i) * ld, store, v[i]);
  }
}

}  // namespace

KernelSet<float> avx512_kernels() {
  KernelSet<float> s;
  s.mr = kMr, s.nr = kNr;
  // 21 KiB of A in L1 (48 KiB), 480 KiB of B in L2 (1 MiB): BLIS's blocking for the same register tile.
  s.kc = 384, s.nc = 15 * kNr, s.mc = 14 * kMr;
  // 256³ and 384³ in place: 10-15 % faster on one Zen 5 core than packed (A's transposes and B's copies were
  // 10 % of the time); from 512³ on the packed path is faster.
  s.in_place_work = int64_t(1) << 26;
  s.kernel = kernel;
  s.transpose = transpose, s.transpose_rows = 16;
  s.dot_block = dot_block_avx2;
  return s;
}

}  // namespace eng::gemm_detail

#endif  // __x86_64__
