// Plain NEON (ARMv8-A baseline) quantized block products: smull/smull2 make int16 products, sadalp adds their
// pairs into 4 int32 lanes. The body is ops/quant_kernels_neon.h.
#if defined(__aarch64__)
#include "ops/quant_kernels_neon.h"

namespace eng::quant_detail {
namespace {

// |w| <= 128 and |x| <= 127: a product and its neighbour fit int16 (sadalp adds them before the next product).
struct MullProduct {
  static int32x4_t sum(const Block& w, int8x16_t x0, int8x16_t x1) {
    int32x4_t p = vpaddlq_s16(vmull_s8(vget_low_s8(w.lo), vget_low_s8(x0)));
    p = vpadalq_s16(p, vmull_high_s8(w.lo, x0));
    p = vpadalq_s16(p, vmull_s8(vget_low_s8(w.hi), vget_low_s8(x1)));
    return vpadalq_s16(p, vmull_high_s8(w.hi, x1));
  }
};

}  // namespace

QuantKernels neon_quant_kernels() {
  QuantKernels k;
  k.name = "neon";
  k.q8_0 = dot<MullProduct, false>;
  k.q4_0 = dot<MullProduct, true>;
  return k;
}

}  // namespace eng::quant_detail
#endif
