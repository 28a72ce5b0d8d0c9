// The NEON body of the quantized block products, included by ops/quant_kernels_neon.cpp (plain Advanced SIMD) and
// ops/quant_kernels_neon_dotprod.cpp (built with the dot-product extension's flag): they differ only
// in the Product policy that turns a block's 32 weights and 32 activations into 4 int32 partial sums. The 4 columns
// of a tile are reduced together by pairwise adds to their exact block sums, which take the f32 steps of
// ops/quant.h in 4 lanes (vmulq, vaddq; never a fused vfmaq), so both give the scalar reference's bits.
// Everything is in an anonymous namespace and the includer includes <arm_neon.h> and ops/quant_kernels.h before
// this body, so that no copy built for the extension is merged by the linker with a baseline one.
#pragma once
#include <arm_neon.h>

#include "ops/quant_kernels.h"

namespace eng::quant_detail {
namespace {

// A block's 32 weights as two vectors of 16 int8 in element order (q4_0: the 4-bit values 0..15).
struct Block {
  int8x16_t lo, hi;
};
inline Block load_q8(const uint8_t* q) {
  return {vld1q_s8(reinterpret_cast<const int8_t*>(q)), vld1q_s8(reinterpret_cast<const int8_t*>(q + 16))};
}
inline Block load_q4(const uint8_t* q) {
  const uint8x16_t bytes = vld1q_u8(q);
  return {vreinterpretq_s8_u8(vandq_u8(bytes, vdupq_n_u8(0x0F))), vreinterpretq_s8_u8(vshrq_n_u8(bytes, 4))};
}

template <class Product, bool kQ4, int64_t R>
inline void dot_rows(const QuantizedRows& x, const uint8_t* w, int64_t w_rs, int64_t cols, float* c, int64_t ldc) {
  constexpr int64_t B = kQ4 ? 20 : 36;
  const uint8_t* wc[4];
  for (int64_t j = 0; j < 4; ++j) wc[j] = w + (j < cols ? j : cols - 1) * w_rs;  // past cols: computed, not stored
  float32x4_t acc[R];
  for (int64_t r = 0; r < R; ++r) acc[r] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < x.blocks; ++b) {
    const int64_t o = b * B;
    const float ds[4] = {block_scale(wc[0] + o), block_scale(wc[1] + o), block_scale(wc[2] + o),
                         block_scale(wc[3] + o)};
    const float32x4_t dw = vld1q_f32(ds);
    Block wv[4];
    for (int64_t j = 0; j < 4; ++j) wv[j] = kQ4 ? load_q4(wc[j] + o + 4) : load_q8(wc[j] + o + 4);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t xb = r * x.blocks + b;
      const int8x16_t x0 = vld1q_s8(x.q + xb * 32), x1 = vld1q_s8(x.q + xb * 32 + 16);
      int32x4_t s = vpaddq_s32(vpaddq_s32(Product::sum(wv[0], x0, x1), Product::sum(wv[1], x0, x1)),
                               vpaddq_s32(Product::sum(wv[2], x0, x1), Product::sum(wv[3], x0, x1)));
      if (kQ4) s = vsubq_s32(s, vdupq_n_s32(8 * x.sum[xb]));
      acc[r] = vaddq_f32(acc[r], vmulq_f32(vcvtq_f32_s32(s), vmulq_f32(dw, vdupq_n_f32(x.d[xb]))));
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    float out[4];
    vst1q_f32(out, acc[r]);
    for (int64_t j = 0; j < cols; ++j) c[r * ldc + j] = out[j];
  }
}

// The tiles of 4 weight rows along `cols`, one call for the whole strip (the call costs as much as a small tile).
template <class Product, bool kQ4, int64_t R>
void dot_strip(const QuantizedRows& x, const uint8_t* w, int64_t w_rs, int64_t cols, float* c, int64_t ldc) {
  for (int64_t n0 = 0; n0 < cols; n0 += 4)
    dot_rows<Product, kQ4, R>(x, w + n0 * w_rs, w_rs, cols - n0 < 4 ? cols - n0 : 4, c + n0, ldc);
}

template <class Product, bool kQ4>
void dot(const QuantizedRows& x, int64_t rows, const uint8_t* w, int64_t w_rs, int64_t cols, float* c, int64_t ldc) {
  static_assert(kTileRows == 4, "the body is written for tiles of up to 4 rows");
  switch (rows) {
    case 1: return dot_strip<Product, kQ4, 1>(x, w, w_rs, cols, c, ldc);
    case 2: return dot_strip<Product, kQ4, 2>(x, w, w_rs, cols, c, ldc);
    case 3: return dot_strip<Product, kQ4, 3>(x, w, w_rs, cols, c, ldc);
    default: return dot_strip<Product, kQ4, 4>(x, w, w_rs, cols, c, ldc);
  }
}

}  // namespace
}  // namespace eng::quant_detail
