// The 16 x 16 in-register transpose the AVX-512 packing shares (ops/gemm_kernels_avx512.cpp,
// ops/gemm_kernels_avx512_bf16.cpp): functions with a target attribute, so including files compile for
// baseline x86-64 and call them only from code the dispatch runs where AVX-512 is present.
#pragma once
#if defined(__x86_64__)
// GCC 12's AVX-512 headers self-initialise their "undefined" registers, which its -Wuninitialized reports
// once they are inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define ENG_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace eng::gemm_detail {

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

}  // namespace eng::gemm_detail

#endif  // __x86_64__
