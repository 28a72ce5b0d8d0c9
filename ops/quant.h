// Quantized weights for inference: Q8_0 and Q4_0, the block formats of ggml with an f32 scale (llama2.c's runq.c
// keeps f32 scales too), and the product x·Wᵀ that reads them with the activations quantized to int8 per block of
// 32 on the fly (ggml's Q8_0 x Q8_0 and Q4_0 x Q8_0 dot products). No autograd: quantized weights are for
// generation only.
//
// A quantized [N, K] matrix (K a multiple of 32) is a u8 tensor [N, K/32, B]: block b of row n holds
// w[n, 32b .. 32b + 31] in B bytes, the f32 scale d first (little-endian), then
//   q8_0 (B = 36): 32 int8 q_i                                                  w_i ≈ d · q_i
//   q4_0 (B = 20): 16 bytes; byte j holds q_j in its low 4 bits, q_{j+16} in its high 4 bits    w_i ≈ d · (q_i - 8)
// quantize(): q8_0: d = max|w| / 127, q_i = round(w_i / d) in -127..127 (round half away from zero). q4_0, as
// ggml: m = the w_i of largest magnitude (the first such), d = m / -8, q_i = min(15, floor(w_i / d + 8.5)). Both
// multiply by 1/d rather than divide. Error per element: |w_i - deq_i| <= |d| / 2 (+ f32 rounding), except in q4_0
// for the elements at the far end from m, clamped to 15: <= |d| there. An all-zero block has d = 0, q = 0 (q4_0: 8).
//
// Activations: each row of x [M, K] is quantized per block of 32 like q8_0, with the f32 scale dx = max|x| / 127,
// x_i = round(x_i · (1/dx)) in -127..127, and the block's sum Σ x_i (for q4_0's offset) kept beside it.
//
// The product (quant_linear): y[m, n] = Σ_b float(s_b) · (dw_b · dx_b), accumulated in block order from +0 in
// f32 (one multiply, one multiply and one add per block, never fused), then + bias[n], where s_b is the exact
// int32 sum Σ_i q_i x_i (q8_0) or Σ_i q_i x_i - 8 Σ_i x_i (q4_0). Every kernel level gives these bits: the block
// sums are exact integers, and the f32 steps are the same operations in the same order. The levels
// (ops/quant_kernels.h): the scalar reference; AVX2 (vpmaddubsw, vpmaddwd); AVX-512 VNNI (vpdpbusd); NEON
// (smull, sadalp) and NEON with the dot-product extension (sdot). ENG_CPU caps them like the other kernels.
// Cost per token and Linear layer: K·N/32 block products, reading N·K·B/32 bytes of weights once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace eng {

enum class QuantFormat : uint8_t { Q8_0, Q4_0 };

constexpr int64_t kQuantBlock = 32;  // weights per block, both formats
int64_t quant_block_bytes(QuantFormat f);  // 36 (q8_0), 20 (q4_0)
const char* quant_format_name(QuantFormat f);  // "q8_0", "q4_0"
// "q8_0" or "q4_0"; false for anything else.
bool parse_quant_format(const std::string& name, QuantFormat& out);

// f32 [N, K] (K a multiple of 32, every element finite, |w| < 1e30) -> u8 [N, K/32, B].
Tensor quantize(const Tensor& w, QuantFormat f);
// u8 [N, K/32, B] -> f32 [N, K]: d · q_i (q8_0) or d · (q_i - 8) (q4_0), in f32.
Tensor dequantize(const Tensor& wq, QuantFormat f);
// The format of a u8 [N, K/32, B] tensor, by its B; throws eng::Error starting with `where` for any other tensor.
QuantFormat quant_format_of(const Tensor& wq, const std::string& where);
// Throws eng::Error starting with `where` when wq is not a contiguous CPU u8 [N, K/32, B] tensor for f: what the
// products check. validate_quantized checks every block's scale is finite too: what a checkpoint's reader checks.
void check_quantized(const Tensor& wq, QuantFormat f, const std::string& where);
void validate_quantized(const Tensor& wq, QuantFormat f, const std::string& where);

// x [..., K] f32 times the quantized W [N, K] transposed, plus bias [N] (optional): [..., N]. Outside autograd;
// x must not require grad. Any number of rows; split over threads by columns, with the same bits for any split.
Tensor quant_linear(const Tensor& x, const Tensor& wq, QuantFormat f, const Tensor& bias = Tensor());
// The same product into caller memory: x [M, K] row-major, y [M, N], bias [N] or null. It allocates nothing once
// its per-thread activation scratch has grown to M·K (models/generator.h calls it per token). wq as quant_linear's,
// checked by the caller (check_quantized).
void quant_linear_rows(const float* x, int64_t M, const Tensor& wq, QuantFormat f, const float* bias, float* y);
// Row `row` of the quantized table wq [V, K/32, B], dequantized into out [K]; the caller checks row < V.
void quant_dequantize_row(const Tensor& wq, QuantFormat f, int64_t row, float* out);
// Rows of the quantized table wq [V, K, ...] picked by ids (i64, any shape, each in 0..V-1), dequantized: [..., K].
Tensor quant_embedding(const Tensor& wq, QuantFormat f, const Tensor& ids);

// The kernel levels this CPU runs, the scalar reference first ("scalar", "avx2", "avx512-vnni", "neon",
// "neon-dotprod"), capped by ENG_CPU; the last is the one quant_linear takes. For tests and benchmarks:
std::vector<std::string> quant_kernel_levels();
Tensor quant_linear_at(const std::string& level, const Tensor& x, const Tensor& wq, QuantFormat f,
                       const Tensor& bias = Tensor());

}  // namespace eng
