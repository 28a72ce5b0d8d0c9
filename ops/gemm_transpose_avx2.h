// The 8 x 8 in-register transpose the AVX2 and AVX-512 packing share (ops/gemm_kernels_avx2.cpp,
// ops/gemm_kernels_avx512_bf16.cpp): functions with a target attribute, so including files compile for
// baseline x86-64 and call them only from code the dispatch runs where AVX2 is present.
#pragma once
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#define ENG_AVX2 __attribute__((target("avx2,fma")))

namespace eng::gemm_detail {

// Rows v[0..7] of 8 floats become columns.
ENG_AVX2 inline void transpose8(__m256 (&v)[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);      // r0k0 r1k0 r0k1 r1k1 | k4 k5
    t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);  // r0k2 r1k2 r0k3 r1k3 | k6 k7
  }
  for (int h = 0; h < 2; ++h)  // rows 0-3, then 4-7
    for (int i = 0; i < 2; ++i) {
      s[4 * h + 2 * i] = _mm256_shuffle_ps(t[4 * h + i], t[4 * h + i + 2], 0x44);      // k(2i) | k(2i+4)
      s[4 * h + 2 * i + 1] = _mm256_shuffle_ps(t[4 * h + i], t[4 * h + i + 2], 0xEE);  // k(2i+1) | k(2i+5)
    }
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    v[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

// Stores exactly `width` floats, so that no panel is written past its end.
ENG_AVX2 inline void store_row(float* d, __m256 v, int64_t width) {
  if (width == 8) {
    _mm256_storeu_ps(d, v);
  } else if (width == 6) {
    _mm_storeu_ps(d, _mm256_castps256_ps128(v));
    _mm_storeu_si64(d + 4, _mm_castps_si128(_mm256_extractf128_ps(v, 1)));
  } else {
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    for (int64_t i = 0; i < width; ++i) d[i] = t[i];
  }
}

}  // namespace eng::gemm_detail

#endif  // __x86_64__
