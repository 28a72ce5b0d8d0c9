// The scalar reference of the quantized block products (ops/quant.h): plain loops in the order the contract
// states, which every SIMD level must match bit for bit (tests/test_quant.cpp).
#include "ops/quant_kernels.h"

namespace eng::quant_detail {
namespace {

// s_b of ops/quant.h for one block of W and one block of x.
int32_t block_sum_q8_0(const uint8_t* w, const int8_t* x, int32_t) {
  const int8_t* q = reinterpret_cast<const int8_t*>(w + 4);
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) s += int32_t(q[i]) * int32_t(x[i]);
  return s;
}

int32_t block_sum_q4_0(const uint8_t* w, const int8_t* x, int32_t x_sum) {
  const uint8_t* q = w + 4;
  int32_t s = 0;
  for (int i = 0; i < 16; ++i) s += int32_t(q[i] & 0x0F) * int32_t(x[i]) + int32_t(q[i] >> 4) * int32_t(x[i + 16]);
  return s - 8 * x_sum;
}

template <int32_t (*BlockSum)(const uint8_t*, const int8_t*, int32_t), int64_t B>
void dot(const QuantizedRows& x, int64_t rows, const uint8_t* w, int64_t w_rs, int64_t cols, float* c, int64_t ldc) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const uint8_t* wj = w + j * w_rs;
      float acc = 0.0f;
      for (int64_t b = 0; b < x.blocks; ++b) {
        const int64_t xb = r * x.blocks + b;
        const int32_t s = BlockSum(wj + b * B, x.q + xb * 32, x.sum[xb]);
        acc = acc + float(s) * (block_scale(wj + b * B) * x.d[xb]);
      }
      c[r * ldc + j] = acc;
    }
}

}  // namespace

QuantKernels scalar_quant_kernels() {
  QuantKernels k;
  k.name = "scalar";
  k.q8_0 = dot<block_sum_q8_0, 36>;
  k.q4_0 = dot<block_sum_q4_0, 20>;
  return k;
}

}  // namespace eng::quant_detail
