// NEON quantized block products with the dot-product extension (ARMv8.2 DotProd, optional before ARMv8.4): sdot
// adds four s8 x s8 products into each int32 lane, two per block. Only this file is compiled for the extension (the
// Makefile's flags for it); the dispatch runs it only where the CPU has it (ops/quant.cpp). The body is
// ops/quant_kernels_neon.h.
#if defined(__aarch64__)
#include <arm_neon.h>

#include "ops/quant_kernels.h"

#include "ops/quant_kernels_neon.h"

namespace eng::quant_detail {
namespace {

struct DotProduct {
  static int32x4_t sum(const Block& w, int8x16_t x0, int8x16_t x1) {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w.lo, x0), w.hi, x1);
  }
};

}  // namespace

QuantKernels neon_dotprod_quant_kernels() {
  QuantKernels k;
  k.name = "neon-dotprod";
  k.q8_0 = dot<DotProduct, false>;
  k.q4_0 = dot<DotProduct, true>;
  return k;
}

}  // namespace eng::quant_detail
#endif
