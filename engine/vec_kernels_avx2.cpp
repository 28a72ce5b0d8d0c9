// The AVX2/FMA table of engine/vec_kernels.h: 8 floats per register. This file alone is compiled with
// -mavx2 -mfma (Makefile), and runs only where the dispatch found both.
#if defined(__x86_64__)
#if !defined(__AVX2__) || !defined(__FMA__)
#error "engine/vec_kernels_avx2.cpp needs -mavx2 -mfma (see the Makefile)"
#endif
#include <immintrin.h>

#include "engine/vec_kernels.h"

namespace eng {
namespace {

struct V {
  using R = __m256;
  using M = __m256;  // all-ones lanes where true
  static constexpr int64_t W = 8;
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, R x) { _mm256_storeu_ps(p, x); }
  static R set(float v) { return _mm256_set1_ps(v); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R min(R a, R b) { return _mm256_min_ps(a, b); }
  static R max(R a, R b) { return _mm256_max_ps(a, b); }
  static R scale2(R p, R n) {
    const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
  }
  static R scale2_biased(R p, R t) {
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(_mm256_castps_si256(t), 23)));
  }
  static R sqrt(R a) { return _mm256_sqrt_ps(a); }
  static R abs(R a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), a); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R fnma(R a, R b, R c) { return _mm256_fnmadd_ps(a, b, c); }
  static R round(R a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static M lt(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M le(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
  static M gt(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M isnan(R a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static M isinf_pos(R a) { return _mm256_cmp_ps(a, _mm256_set1_ps(__builtin_inff()), _CMP_EQ_OQ); }
  static R select(M m, R a, R b) { return _mm256_blendv_ps(b, a, m); }
  static M mask_or(M a, M b) { return _mm256_or_ps(a, b); }
  static bool any(M m) { return _mm256_movemask_ps(m) != 0; }
  static R pow2i(R n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static R frexp(R x, R& e) {
    const __m256i bits = _mm256_castps_si256(x);
    e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(127)));
    const __m256i mant = _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                                         _mm256_set1_epi32(0x3f800000));
    return _mm256_castsi256_ps(mant);
  }
  static R copysign(R mag, R sign) {
    const R s = _mm256_set1_ps(-0.f);
    return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sign));
  }
  static float first(R x) { return _mm256_cvtss_f32(x); }
  static float hsum(R x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(R x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace
}  // namespace eng

#define ENG_VEC_NAME "avx2"
#include "engine/vec_kernels_simd.h"

namespace eng {
const VecKernels& avx2_vec_kernels() { return simd_table; }
}  // namespace eng
#endif
