// The AVX-512 table of engine/vec_kernels.h: 16 floats per register, mask registers for compares. This
// file alone is compiled with -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma (Makefile), and runs only where
// the dispatch found AVX-512 F, BW and VL.
#if defined(__x86_64__)
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error "engine/vec_kernels_avx512.cpp needs -mavx512f -mavx512bw -mavx512vl (see the Makefile)"
#endif
// GCC 12's AVX-512 headers self-initialise their "undefined" registers, which its -Wuninitialized reports
// once they are inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "engine/vec_kernels.h"

namespace eng {
namespace {

struct V {
  using R = __m512;
  using M = __mmask16;
  static constexpr int64_t W = 16;
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, R x) { _mm512_storeu_ps(p, x); }
  static R set(float v) { return _mm512_set1_ps(v); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  static R min(R a, R b) { return _mm512_min_ps(a, b); }
  static R max(R a, R b) { return _mm512_max_ps(a, b); }
  static R scale2(R p, R n) {
    const __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
  }
  static R scale2_biased(R p, R t) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32(_mm512_castps_si512(t), 23)));
  }
  static R sqrt(R a) { return _mm512_sqrt_ps(a); }
  static R abs(R a) { return _mm512_abs_ps(a); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R fnma(R a, R b, R c) { return _mm512_fnmadd_ps(a, b, c); }
  static R round(R a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static M lt(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M le(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
  static M gt(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M isnan(R a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static M isinf_pos(R a) { return _mm512_cmp_ps_mask(a, _mm512_set1_ps(__builtin_inff()), _CMP_EQ_OQ); }
  static R select(M m, R a, R b) { return _mm512_mask_blend_ps(m, b, a); }
  static M mask_or(M a, M b) { return M(a | b); }
  static bool any(M m) { return m != 0; }
  static R pow2i(R n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static R frexp(R x, R& e) {
    const __m512i bits = _mm512_castps_si512(x);
    e = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(bits, 23), _mm512_set1_epi32(127)));
    const __m512i mant = _mm512_or_si512(_mm512_and_si512(bits, _mm512_set1_epi32(0x007fffff)),
                                         _mm512_set1_epi32(0x3f800000));
    return _mm512_castsi512_ps(mant);
  }
  static R copysign(R mag, R sign) {
    const __m512i s = _mm512_set1_epi32(int(0x80000000u));
    const __m512i m = _mm512_andnot_si512(s, _mm512_castps_si512(mag));
    return _mm512_castsi512_ps(_mm512_or_si512(m, _mm512_and_si512(s, _mm512_castps_si512(sign))));
  }
  static float first(R x) { return _mm512_cvtss_f32(x); }
  static float hsum(R x) { return _mm512_reduce_add_ps(x); }
  static float hmax(R x) { return _mm512_reduce_max_ps(x); }
};

}  // namespace
}  // namespace eng

#define ENG_VEC_NAME "avx512"
#include "engine/vec_kernels_simd.h"

namespace eng {
const VecKernels& avx512_vec_kernels() { return simd_table; }
}  // namespace eng
#endif
