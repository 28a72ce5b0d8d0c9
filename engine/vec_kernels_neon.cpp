// The NEON table of engine/vec_kernels.h for 64-bit ARM (Advanced SIMD is mandatory there): 4 floats per
// register. Built on AArch64 only; `make test-aarch64` runs it under qemu-user.
#if defined(__aarch64__)
#include <arm_neon.h>

#include "engine/vec_kernels.h"

namespace eng {
namespace {

struct V {
  using R = float32x4_t;
  using M = uint32x4_t;  // all-ones lanes where true
  static constexpr int64_t W = 4;
  static R load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, R x) { vst1q_f32(p, x); }
  static R set(float v) { return vdupq_n_f32(v); }
  static R add(R a, R b) { return vaddq_f32(a, b); }
  static R sub(R a, R b) { return vsubq_f32(a, b); }
  static R mul(R a, R b) { return vmulq_f32(a, b); }
  static R div(R a, R b) { return vdivq_f32(a, b); }
  // vminq/vmaxq propagate NaN, as the x86 ones do not; the generic code only relies on non-NaN lanes.
  static R min(R a, R b) { return vminq_f32(a, b); }
  static R max(R a, R b) { return vmaxq_f32(a, b); }
  static R scale2(R p, R n) {
    const int32x4_t e = vshlq_n_s32(vcvtnq_s32_f32(n), 23);
    return vreinterpretq_f32_s32(vaddq_s32(vreinterpretq_s32_f32(p), e));
  }
  static R scale2_biased(R p, R t) {
    return vreinterpretq_f32_s32(vaddq_s32(vreinterpretq_s32_f32(p), vshlq_n_s32(vreinterpretq_s32_f32(t), 23)));
  }
  static R sqrt(R a) { return vsqrtq_f32(a); }
  static R abs(R a) { return vabsq_f32(a); }
  static R fma(R a, R b, R c) { return vfmaq_f32(c, a, b); }
  static R fnma(R a, R b, R c) { return vfmsq_f32(c, a, b); }
  static R round(R a) { return vrndnq_f32(a); }
  static M lt(R a, R b) { return vcltq_f32(a, b); }
  static M le(R a, R b) { return vcleq_f32(a, b); }
  static M gt(R a, R b) { return vcgtq_f32(a, b); }
  static M isnan(R a) { return vmvnq_u32(vceqq_f32(a, a)); }
  static M isinf_pos(R a) { return vceqq_f32(a, vdupq_n_f32(__builtin_inff())); }
  static R select(M m, R a, R b) { return vbslq_f32(m, a, b); }
  static M mask_or(M a, M b) { return vorrq_u32(a, b); }
  static bool any(M m) { return vmaxvq_u32(m) != 0; }
  static R pow2i(R n) {
    const int32x4_t e = vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127));
    return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
  }
  static R frexp(R x, R& e) {
    const uint32x4_t bits = vreinterpretq_u32_f32(x);
    e = vcvtq_f32_s32(vsubq_s32(vreinterpretq_s32_u32(vshrq_n_u32(bits, 23)), vdupq_n_s32(127)));
    const uint32x4_t mant = vorrq_u32(vandq_u32(bits, vdupq_n_u32(0x007fffff)), vdupq_n_u32(0x3f800000));
    return vreinterpretq_f32_u32(mant);
  }
  static R copysign(R mag, R sign) { return vbslq_f32(vdupq_n_u32(0x80000000u), sign, mag); }
  static float first(R x) { return vgetq_lane_f32(x, 0); }
  static float hsum(R x) { return vaddvq_f32(x); }
  static float hmax(R x) { return vmaxvq_f32(x); }
};

}  // namespace
}  // namespace eng

#define ENG_VEC_NAME "neon"
#include "engine/vec_kernels_simd.h"

namespace eng {
const VecKernels& neon_vec_kernels() { return simd_table; }
}  // namespace eng
#endif
