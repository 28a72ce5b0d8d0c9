// AVX512_BF16 GEMM micro-kernel and packing: a 14 x 32 tile of C in 28 zmm accumulators, as the f32 AVX-512
// kernel, but each step takes a pair of k: one vdpbf16ps per accumulator adds two exact products (odd k first),
// so a step does twice the f32 kernel's work for the same instructions. The A pair is broadcast from memory.
// Packing converts with vcvtne2ps2bf16, the rounding of ops/bf16.h. Built with a target attribute, so the file
// compiles for baseline x86-64 and runs only where the dispatch found AVX512_BF16.
#include "ops/gemm_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>

#include "ops/bf16.h"
#include "ops/gemm_transpose_avx512.h"

#define ENG_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))

namespace eng::gemm_detail {
namespace {

constexpr int kMr = 14, kNr = 32;

// kRowsA: A's panel row-major (row r at a + r * pairs, PairKernelSet::kernel_rows), else k-major (pair p of row r
// at a[p * kMr + r]).
template <bool kRowsA>
ENG_AVX512BF16 void tile(int64_t pairs, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool load_c,
                         const float* bias) {
  __m512 lo[kMr], hi[kMr];
  const __m512 bias_lo = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
  const __m512 bias_hi = bias ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int r = 0; r < kMr; ++r) {
    lo[r] = load_c ? _mm512_loadu_ps(c + r * ldc) : bias_lo;
    hi[r] = load_c ? _mm512_loadu_ps(c + r * ldc + 16) : bias_hi;
  }
  // Row-major A: rows 0-6 and 7-13 from two bases at the same 7 offsets (14 row pointers would spill).
  const int64_t s = kRowsA ? pairs : 1;
  const int64_t off[7] = {0, s, 2 * s, 3 * s, 4 * s, 5 * s, 6 * s};
  const uint32_t* a7 = a + 7 * s;
  for (int64_t p = 0; p < pairs; ++p, a += kRowsA ? 1 : kMr, a7 += kRowsA ? 1 : kMr, b += kNr) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 16);
#pragma GCC unroll 16
    for (int r = 0; r < kMr; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(r < 7 ? a[off[r]] : a7[off[r - 7]]));
      lo[r] = _mm512_dpbf16_ps(lo[r], av, b0);
      hi[r] = _mm512_dpbf16_ps(hi[r], av, b1);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kMr; ++r) {
    _mm512_storeu_ps(c + r * ldc, lo[r]);
    _mm512_storeu_ps(c + r * ldc + 16, hi[r]);
  }
}

ENG_AVX512BF16 void kernel(int64_t pairs, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool load_c,
                          const float* bias) {
  tile<false>(pairs, a, b, c, ldc, load_c, bias);
}

ENG_AVX512BF16 void kernel_rows(int64_t pairs, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                               bool load_c, const float* bias) {
  tile<true>(pairs, a, b, c, ldc, load_c, bias);
}

// Pairs along k contiguous in src (cs == 1: A as stored, B transposed): each of up to 16 rows converts 32 values
// of k into 16 pairs (vcvtne2ps2bf16 keeps them in k order, so each 32-bit lane is a pair), and a 16 x 16
// transpose of the pairs makes them k-major.
ENG_AVX512BF16 void pack_pairs_along_k(const float* src, int64_t rs, int64_t rows, int64_t width, int64_t kc,
                                       uint32_t* dst) {
  const int64_t depth = (kc + 1) / 2;
  for (int64_t r0 = 0; r0 < width; r0 += 16) {
    const __mmask16 store = __mmask16((1u << std::min<int64_t>(16, width - r0)) - 1);
    for (int64_t p0 = 0; p0 < depth; p0 += 16) {
      const int64_t k0 = 2 * p0, nk = std::min<int64_t>(32, kc - k0);
      const __mmask16 lo = __mmask16((1u << std::min<int64_t>(16, nk)) - 1);
      const __mmask16 hi = __mmask16((1u << std::max<int64_t>(0, nk - 16)) - 1);
      __m512 v[16];
      for (int i = 0; i < 16; ++i) {
        v[i] = _mm512_setzero_ps();
        if (r0 + i >= rows) continue;
        const float* s = src + (r0 + i) * rs + k0;
        v[i] = (__m512)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, s + 16), _mm512_maskz_loadu_ps(lo, s));
      }
      transpose16(v);
      for (int64_t i = 0; i < std::min<int64_t>(16, depth - p0); ++i)
        _mm512_mask_storeu_ps(reinterpret_cast<float*>(dst + (p0 + i) * width + r0), store, v[i]);
    }
  }
}

// Rows contiguous in src (rs == 1: A transposed, B as stored): two k rows of 16 values convert together and
// interleave into 16 pairs. The k pairs are the outer loop, so each source line is read once for all panels
// while it is in L1 (panel by panel, a row stride of 4 KiB put every read of a panel in one L1 set).
// (The maskz forms: GCC 12 warns that the plain ones read an undefined register.)
ENG_AVX512BF16 void pack_pairs_across_k(const float* src, int64_t cs, int64_t rows, int64_t width, int64_t kc,
                                        uint32_t* dst) {
  alignas(64) static constexpr int16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                          8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  const int64_t depth = (kc + 1) / 2, panels = (rows + width - 1) / width;
  for (int64_t k = 0; k < kc; k += 2) {
    const float* even_row = src + k * cs;
    const float* odd_row = k + 1 < kc ? even_row + cs : nullptr;
    for (int64_t i = 0; i < panels; ++i)
      for (int64_t c0 = 0; c0 < width; c0 += 16) {
        const int64_t r0 = i * width + c0, span = std::min<int64_t>(16, width - c0);
        const int64_t n = std::clamp<int64_t>(rows - r0, 0, span);
        const __mmask16 keep = __mmask16((1u << n) - 1), store = __mmask16((1u << span) - 1);
        if (k + 17 < kc) {  // the lines 8 pairs ahead: 5 % of a 1024³ bf16 product on one Zen 5 core
          _mm_prefetch(reinterpret_cast<const char*>(even_row + 16 * cs + r0), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(even_row + 17 * cs + r0), _MM_HINT_T0);
        }
        uint32_t* d = dst + (i * depth + k / 2) * width + c0;
        if (n == 16 && odd_row) {  // a whole run of 16 columns: plain loads and store
          const __m512bh both = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(odd_row + r0), _mm512_loadu_ps(even_row + r0));
          _mm512_storeu_si512(d, _mm512_permutexvar_epi16(interleave, (__m512i)both));
          continue;
        }
        const __m512 even = _mm512_maskz_loadu_ps(keep, even_row + r0);
        const __m512 odd = odd_row ? _mm512_maskz_loadu_ps(keep, odd_row + r0) : _mm512_setzero_ps();
        const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(odd, even);  // even in the low half, odd in the high
        _mm512_mask_storeu_epi32(d, store, _mm512_maskz_permutexvar_epi16(~__mmask32(0), interleave, both));
      }
  }
}

// Row-major panels of rows along k (cs == 1, kernel_rows): each row converts 32 values at a time into its next 16
// pairs, no transpose.
ENG_AVX512BF16 void pack_rows(const float* src, int64_t rs, [[maybe_unused]] int64_t cs, int64_t rows, int64_t width,
                              int64_t kc, uint32_t* dst) {
  const int64_t depth = (kc + 1) / 2, padded = (rows + width - 1) / width * width;
  for (int64_t r = 0; r < padded; ++r, src += rs, dst += depth) {
    if (r >= rows) {
      std::fill(dst, dst + depth, 0u);
      continue;
    }
    int64_t k = 0;
    for (; k + 32 <= kc; k += 32) {
      const __m512bh both = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + k + 16), _mm512_loadu_ps(src + k));
      _mm512_storeu_si512(dst + k / 2, (__m512i)both);
    }
    if (k < kc) {  // the tail by masked loads (zeros past kc: an odd kc's last pair is (x, 0))
      const int64_t nk = kc - k;
      const __mmask16 lo = __mmask16((1u << std::min<int64_t>(16, nk)) - 1);
      const __mmask16 hi = __mmask16((1u << std::max<int64_t>(0, nk - 16)) - 1);
      const __m512bh both =
          _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + k + 16), _mm512_maskz_loadu_ps(lo, src + k));
      _mm512_mask_storeu_epi32(dst + k / 2, __mmask16((1u << (nk + 1) / 2) - 1), (__m512i)both);
    }
  }
}

ENG_AVX512BF16 void pack(const float* src, int64_t rs, int64_t cs, int64_t rows, int64_t width, int64_t kc,
                         uint32_t* dst) {
  if (rs == 1 && cs != 1) return pack_pairs_across_k(src, cs, rows, width, kc, dst);
  const int64_t depth = (kc + 1) / 2;
  for (int64_t r0 = 0; r0 < rows; r0 += width, dst += depth * width) {
    const int64_t n = std::min(width, rows - r0);
    const float* s = src + r0 * rs;
    if (cs == 1) {
      pack_pairs_along_k(s, rs, n, width, kc, dst);
      continue;
    }
    for (int64_t p = 0; p < depth; ++p)
      for (int64_t r = 0; r < width; ++r) {
        const int64_t k = 2 * p;
        const uint32_t even = r < n ? bf16_from_f32(s[r * rs + k * cs]) : 0;
        const uint32_t odd = r < n && k + 1 < kc ? bf16_from_f32(s[r * rs + (k + 1) * cs]) : 0;
        dst[p * width + r] = even | odd << 16;
      }
  }
}

}  // namespace

PairKernelSet avx512bf16_kernels() {
  PairKernelSet s;
  s.mr = kMr, s.nr = kNr;
  // As the f32 AVX-512 set of kc = 384 in bytes: a pair row of B is 128 bytes, one f32 row's worth, so kc doubles.
  // 1536 x 256 (the f32 set's 768 x 256 in bytes) ran the bf16 GEMM shapes faster alone (2048³ 216 -> 348 GFLOP/s,
  // best of 4, one loaded core) but bench train --precision bf16 2.5-4x slower in CPU time per step, its elementwise
  // kernels too, and as fast as with these once glibc's heap trimming was off (MALLOC_TRIM_THRESHOLD_ and
  // MALLOC_TOP_PAD_ set: 1.71 -> 0.43 s per step): a heap effect of the larger buffers, to be removed before.
  s.kc = 768, s.nc = 15 * kNr, s.mc = 14 * kMr;
  s.kernel = kernel;
  s.pack = pack;
  s.kernel_rows = kernel_rows;
  s.pack_rows = pack_rows;
  return s;
}

}  // namespace eng::gemm_detail

#endif  // __x86_64__
