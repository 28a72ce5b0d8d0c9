// Internal to ops/quant.cpp: the block-product kernels of each instruction-set level (ops/quant_kernels_*.cpp), all
// computing the bits ops/quant.h defines.
#pragma once
#include <cstdint>

namespace eng::quant_detail {

// Rows of x quantized per block of 32 (ops/quant.h): row r's int8 values at q + r * blocks * 32, its block scales
// at d + r * blocks, its block sums at sum + r * blocks.
struct QuantizedRows {
  int64_t blocks = 0;
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int32_t* sum = nullptr;
};

// c[r * ldc + j] = y[r, j] of ops/quant.h for r < rows <= kTileRows, j < cols, where W's row j is the x.blocks
// blocks at w + j * w_rs bytes. One function per weight format; the SIMD ones work in tiles of kTileCols weight
// rows.
constexpr int64_t kTileRows = 4, kTileCols = 4;
using QuantDotFn = void (*)(const QuantizedRows& x, int64_t rows, const uint8_t* w, int64_t w_rs, int64_t cols,
                            float* c, int64_t ldc);

struct QuantKernels {
  const char* name = nullptr;
  QuantDotFn q8_0 = nullptr, q4_0 = nullptr;
};

QuantKernels scalar_quant_kernels();
#if defined(__x86_64__)
QuantKernels avx2_quant_kernels();
QuantKernels avx512_vnni_quant_kernels();
#endif
#if defined(__aarch64__)
QuantKernels neon_quant_kernels();
QuantKernels neon_dotprod_quant_kernels();
#endif

// The f32 scale at the start of a block (unaligned, little-endian: the host's order, checked by the reader).
inline float block_scale(const uint8_t* block) {
  float d;
  __builtin_memcpy(&d, block, 4);
  return d;
}

}  // namespace eng::quant_detail
