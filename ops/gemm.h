// GEMM kernels: C (+)= A · B on strided operands, so transposed and batched inputs need no copies.
// gemm_reference is the plain triple loop every faster kernel is tested against; gemm packs A and B into
// cache-sized panels and runs register-tile micro-kernels (AVX-512, AVX2/FMA, or portable C++), picked at
// run time from the CPU (engine/cpu_features.h; ENG_CPU caps the level).
//
// A bf16 product (GemmPrecision::Bf16, f32 only) rounds both operands to bf16 as it packs them and accumulates
// in f32: mixed-precision training's matrix products. gemm_bf16_reference defines its bits: each operand
// element becomes bf16 by bf16_from_f32 (ops/bf16.h: round to nearest even, denormals to signed zero, NaN stays
// a quiet NaN); the k terms go in pairs (k, k + 1) for even k, with a zero term after an odd K, and each C
// element is the f32 chain c = (c + a[k+1] b[k+1]) + a[k] b[k] over the pairs in order, starting from C
// (accumulate), the bias or +0. A product of two bf16 values is exact in f32, so only the additions round (to nearest
// even, denormals kept): exactly what vdpbf16ps computes per lane, measured bit for bit on a Zen 5 (Intel's
// manual has it flush denormal sums to zero, the one case where its CPUs would differ). Every kernel level
// gives these bits: AVX512_BF16 with vdpbf16ps, the others with their f32 kernels on panels of rounded values
// whose pairs are stored odd element first.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/cpu_features.h"

namespace eng {

enum class GemmPrecision : uint8_t { F32, Bf16 };

template <class T>
struct GemmArgs {
  int64_t M = 0, N = 0, K = 0;
  const T* A = nullptr;
  int64_t a_rs = 0, a_cs = 0;  // A[m, k] = A[m * a_rs + k * a_cs]
  const T* B = nullptr;
  int64_t b_rs = 0, b_cs = 0;  // B[k, n] = B[k * b_rs + n * b_cs]
  T* C = nullptr;
  int64_t c_rs = 0;            // C[m, n] = C[m * c_rs + n], rows contiguous
  bool accumulate = false;     // C += A·B instead of C = A·B
  // C = bias + A·B, bias[n] added to every row: the same bits as filling each row of C with the bias and
  // accumulating. The tile is filled just before its first multiply-add, in cache, so a Linear layer's bias costs
  // no pass over the output. Not with accumulate.
  const T* bias = nullptr;
  GemmPrecision precision = GemmPrecision::F32;  // Bf16: f32 operands only (an f64 product refuses it)
};

template <class T>
void gemm_reference(const GemmArgs<T>& g);
// The bits every bf16 product must give (see the top of this file); ignores g.precision.
void gemm_bf16_reference(const GemmArgs<float>& g);

// Called outside a parallel region, a large product is split over the thread pool; inside one (a caller
// that parallelises over batches) it runs on the calling thread. The bits of the result depend on the
// kernel level and the shape only, never on the thread count or on how the work is split: each C element
// is one multiply-add chain in k order, starting from C (accumulate) or 0 — except products with A's rows and
// B's columns both contiguous along k (x·Wᵀ): with one or two rows they take the SIMD dot's partial sums, and
// in f32 at the AVX2 level (not AVX-512) with up to 48 rows, eight lane sums per element (ops/gemm_kernels.h),
// each in a fixed order.
// So a split into row blocks keeps the bits when every block takes the path the whole product takes.
// A bf16 product's bits depend on nothing but its operands (gemm_bf16_reference).
template <class T>
void gemm(const GemmArgs<T>& g);

// The same with the kernels of `level`, lowered to what simd_level() allows: for tests and benchmarks.
// f64 has one portable kernel at every level.
template <class T>
void gemm(const GemmArgs<T>& g, SimdLevel level);

// B packed once for many products by the same B (a Linear layer's weight through generation, where each step
// multiplies a few rows by it): the kc x nr panels gemm would otherwise pack on every call, for the kernel level
// current when packed. f32 only.
struct PackedB {
  int64_t K = 0, N = 0;
  SimdLevel level = SimdLevel::Scalar;
  std::vector<float> panels;  // slice k0 (kc rows) holds the panels of all columns, nr wide, from panels[k0 * N']
};
PackedB pack_b(const GemmArgs<float>& g);  // g.B, b_rs, b_cs, K and N; the rest is ignored

// An elementwise map y[i] = f(x[i]) over n values (in place: x == y), e.g. an activation from engine/vec_kernels.h.
// Its bits must not depend on where a row is split, as the SIMD kernels' lanes do not.
using RowMap = void (*)(const float* x, float* y, int64_t n);

// gemm(g) with B read from `b`, which must hold g.B's current values (the caller's to keep true). Each C element
// is one multiply-add chain in k order from C (accumulate), the bias or 0: the bits of gemm's packed path. Takes
// gemm(g) itself where the panels do not serve (a bf16 product, one or two rows, another kernel level).
// `then`, when set, maps C afterwards, each job's columns of every row while they are in cache (a Linear layer's
// activation, without a pass or a thread-pool job of its own).
void gemm(const GemmArgs<float>& g, const PackedB& b, RowMap then = nullptr);

}  // namespace eng
