// AVX-512 VNNI quantized block products: one vpdpbusd (256-bit form, AVX512_VNNI + AVX512VL) makes the 8 int32 sums
// of u8 x s8 products that AVX2 needs two instructions for, with no int16 intermediate. Only this file is compiled
// for AVX-512 VNNI (the Makefile's flags for it); the dispatch runs it only where the CPU has it (ops/quant.cpp).
#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/quant_kernels.h"

#include "ops/quant_kernels_x86.h"

namespace eng::quant_detail {
namespace {

struct VnniProduct {
  static __m256i q8(const ActivationsQ8& x, __m256i w) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), x.a, _mm256_sign_epi8(w, x.x));
  }
  static __m256i q4(__m256i w, __m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x); }
};

}  // namespace

QuantKernels avx512_vnni_quant_kernels() {
  QuantKernels k;
  k.name = "avx512-vnni";
  k.q8_0 = dot<VnniProduct, false>;
  k.q4_0 = dot<VnniProduct, true>;
  return k;
}

}  // namespace eng::quant_detail
#endif
