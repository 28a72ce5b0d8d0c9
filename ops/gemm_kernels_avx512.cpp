// AVX-512 GEMM micro-kernel: a 14 x 32 tile of C in 28 zmm accumulators. Each k step loads one row of
// the B panel (two zmm) and broadcasts 14 values of A, for 28 FMAs: enough independent chains to keep
// both FMA pipes busy through their latency, with two registers to spare. An 8 x 32 tile (16 chains, 10 loads
// per 16 FMAs) on the same B panels covers the row counts 14 fits badly: 32 rows are 4 x 8, where 14 + 14 + 4
// would compute 42. Built with a target attribute, so the file compiles for baseline x86-64 and runs only where
// the dispatch found AVX-512.
#include "ops/gemm_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>

#include "ops/gemm_transpose_avx512.h"

namespace eng::gemm_detail {
namespace {

constexpr int kMr = 14, kMrShort = 8, kNr = 32;
// The short tile serves products whose B is packed once and streams from memory (a generation step reads every
// weight once per token: 25 MiB at d_model 256, 8 layers): it asks for B's row k + kAhead (16 KiB ahead, across
// panel and page ends, which stop the hardware prefetcher) while it multiplies row k. M = 32, 8 layers' weights,
// 1 thread: 133 -> 145 GF/s (CPU time, 3 alternating rounds; 64 and 128 rows ahead alike, 256 worse).
constexpr int64_t kAhead = 128;

template <int kRows, bool kPackedA>
ENG_AVX512 void tile(int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
                     int64_t ldc, bool load_c) {
  const int64_t rs = kPackedA ? 1 : a_rs, cs = kPackedA ? kRows : a_cs;
  __m512 lo[kRows], hi[kRows];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    lo[r] = load_c ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
    hi[r] = load_c ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < K; ++k, a += cs, b += ldb) {
    if (kRows == kMrShort) {  // prefetches never fault: past the panels' end they are dropped
      _mm_prefetch(reinterpret_cast<const char*>(b + kAhead * ldb), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b + kAhead * ldb + 16), _MM_HINT_T0);
    }
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * rs]);
      lo[r] = _mm512_fmadd_ps(av, b0, lo[r]);
      hi[r] = _mm512_fmadd_ps(av, b1, hi[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    _mm512_storeu_ps(c + r * ldc, lo[r]);
    _mm512_storeu_ps(c + r * ldc + 16, hi[r]);
  }
}

template <int kRows>
ENG_AVX512 void kernel(int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
                       int64_t ldc, bool load_c) {
  if (a_rs == 1 && a_cs == kRows)
    tile<kRows, true>(K, a, a_rs, a_cs, b, ldb, c, ldc, load_c);
  else
    tile<kRows, false>(K, a, a_rs, a_cs, b, ldb, c, ldc, load_c);
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
  // k slices of 768 (an A panel is 42 KiB of the 48 KiB L1) and B blocks of 8 panels (768 KiB of the 1 MiB L2):
  // half the passes over C of BLIS's kc = 384 for the same tile, which at 2048³ costs more than A's panel
  // sharing L1 with B's stream. Best of 6 alternated runs on one loaded Zen 5 core, GFLOP/s, kc x nc = 384 x 480
  // -> 768 x 256: 2048³ 170.5 -> 178.0, 1024³ 173.1 -> 177.6, 4096 x 2048 x 512 170.3 -> 184.4,
  // 4096 x 512 x 2048 179.0 -> 184.0, 512³ 185.1 -> 185.7.
  s.kc = 768, s.nc = 8 * kNr, s.mc = 14 * kMr;
  // In place, 256³ ran 8-20 % and 384³ 5 % faster on one Zen 5 core than packed (A's transposes and B's copies
  // were 10 % of the time); from 512³ on the packed path is faster. Measured with kc = 384 and nc = 480, so the
  // bounds stay those.
  s.in_place_work = int64_t(1) << 26, s.in_place_kc = 384, s.in_place_nc = 15 * kNr;
  s.kernel = kernel<kMr>;
  s.mr_short = kMrShort, s.kernel_short = kernel<kMrShort>;
  s.transpose = transpose, s.transpose_rows = 16;
  // No dot_block: with 3..48 rows of x·Wᵀ this tile runs 2-3.5x faster than the AVX2 dot blocks even with W
  // packed on every call (108-127 against 33-58 GF/s on one Zen 5 core, M = 32, K and N 256 or 1024).
  return s;
}

}  // namespace eng::gemm_detail

#endif  // __x86_64__
