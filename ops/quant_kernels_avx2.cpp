// AVX2 quantized block products: vpmaddubsw makes 16 int16 pair sums of u8 x s8, vpmaddwd by ones 8 int32 sums.
// Only this file is compiled for AVX2 (the Makefile's flags for it); the dispatch runs it only where the CPU has
// AVX2 (ops/quant.cpp).
#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/quant_kernels.h"

#include "ops/quant_kernels_x86.h"

namespace eng::quant_detail {
namespace {

struct MaddProduct {
  static __m256i q8(const ActivationsQ8& x, __m256i w) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x.a, _mm256_sign_epi8(w, x.x)), _mm256_set1_epi16(1));
  }
  static __m256i q4(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
  }
};

}  // namespace

QuantKernels avx2_quant_kernels() {
  QuantKernels k;
  k.name = "avx2";
  k.q8_0 = dot<MaddProduct, false>;
  k.q4_0 = dot<MaddProduct, true>;
  return k;
}

}  // namespace eng::quant_detail
#endif
