// Batched row-major GEMM, C = alpha op(A) op(B) + beta C, in three algorithms (ops/cuda/kernels.h):
// Reference (a thread per output), Tiled (fp32 FMA from shared-memory tiles) and Tf32 (tensor cores
// through WMMA). All three read op(A) and op(B) through the same index functions, so a transpose is only
// a different stride, and all three zero-fill the out-of-range part of an edge tile, so any M, N, K works.
// The batch index is blockIdx.z; batches beyond the grid's z limit are launched in further chunks.
#include <mma.h>

#include <algorithm>

#include "engine/cuda.h"
#include "engine/error.h"
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"

namespace eng::cuda {
namespace {

struct GemmArgs {
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha, beta;
  const float* A;
  int64_t lda, stride_a;
  const float* B;
  int64_t ldb, stride_b;
  float* C;
  int64_t ldc, stride_c;
};

// op(A)[m, k] and op(B)[k, n] of one batch's matrices.
__device__ float load_a(const GemmArgs& g, const float* A, int64_t m, int64_t k) {
  return g.trans_a ? A[k * g.lda + m] : A[m * g.lda + k];
}
__device__ float load_b(const GemmArgs& g, const float* B, int64_t k, int64_t n) {
  return g.trans_b ? B[n * g.ldb + k] : B[k * g.ldb + n];
}

// C[m, n] = alpha acc + beta C[m, n]; with beta == 0, C is not read (it may hold NaN).
__device__ void store_c(const GemmArgs& g, float* C, int64_t m, int64_t n, float acc) {
  float* c = C + m * g.ldc + n;
  *c = g.beta == 0.f ? g.alpha * acc : g.alpha * acc + g.beta * *c;
}

constexpr int kRefThreads = 256;

// Thread per output C[m, n] of batch blockIdx.z: a plain loop over k.
__global__ void gemm_reference_kernel(GemmArgs g) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= g.M * g.N) return;
  const int64_t m = idx / g.N, n = idx % g.N;
  const float* A = g.A + blockIdx.z * g.stride_a;
  const float* B = g.B + blockIdx.z * g.stride_b;
  float acc = 0.f;
  for (int64_t k = 0; k < g.K; ++k) acc += load_a(g, A, m, k) * load_b(g, B, k, n);
  store_c(g, g.C + blockIdx.z * g.stride_c, m, n, acc);
}

constexpr int kTileM = 128, kTileN = 128, kTileK = 8;  // block tile
constexpr int kThreadM = 8, kThreadN = 8;              // outputs per thread
constexpr int kTiledThreads = (kTileM / kThreadM) * (kTileN / kThreadN);

// Block per 128x128 tile of C (blockIdx.x = tile row * tiles_n + tile column). Per step of 8 along k, the
// block stages op(A)'s 128x8 and op(B)'s 8x128 slices in shared memory, k-major, and thread (ty, tx) of
// the 16x16 grid accumulates outputs (ty + 16 i, tx + 16 j), i, j < 8, in registers. The interleaved
// outputs make a warp's shared reads hit distinct banks (or broadcast), and its C writes contiguous.
__global__ void __launch_bounds__(kTiledThreads) gemm_tiled_kernel(GemmArgs g, int64_t tiles_n) {
  // +4: the transposed stores below (consecutive threads along k) then spread over the banks
  __shared__ float As[kTileK][kTileM + 4];
  __shared__ float Bs[kTileK][kTileN + 4];
  const int64_t m0 = int64_t(blockIdx.x / tiles_n) * kTileM, n0 = int64_t(blockIdx.x % tiles_n) * kTileN;
  const float* A = g.A + blockIdx.z * g.stride_a;
  const float* B = g.B + blockIdx.z * g.stride_b;
  const int tid = threadIdx.x, tx = tid % (kTileN / kThreadN), ty = tid / (kTileN / kThreadN);
  float acc[kThreadM][kThreadN] = {};
  for (int64_t k0 = 0; k0 < g.K; k0 += kTileK) {
    // Consecutive threads take consecutive addresses of the source matrix, so the global loads coalesce.
    for (int l = tid; l < kTileM * kTileK; l += kTiledThreads) {
      const int mi = g.trans_a ? l % kTileM : l / kTileK, ki = g.trans_a ? l / kTileM : l % kTileK;
      const int64_t m = m0 + mi, k = k0 + ki;
      As[ki][mi] = m < g.M && k < g.K ? load_a(g, A, m, k) : 0.f;
    }
    for (int l = tid; l < kTileK * kTileN; l += kTiledThreads) {
      const int ni = g.trans_b ? l / kTileK : l % kTileN, ki = g.trans_b ? l % kTileK : l / kTileN;
      const int64_t n = n0 + ni, k = k0 + ki;
      Bs[ki][ni] = n < g.N && k < g.K ? load_b(g, B, k, n) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[kThreadM], b[kThreadN];
#pragma unroll
      for (int i = 0; i < kThreadM; ++i) a[i] = As[kk][ty + i * (kTileM / kThreadM)];
#pragma unroll
      for (int j = 0; j < kThreadN; ++j) b[j] = Bs[kk][tx + j * (kTileN / kThreadN)];
#pragma unroll
      for (int i = 0; i < kThreadM; ++i)
#pragma unroll
        for (int j = 0; j < kThreadN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  float* C = g.C + blockIdx.z * g.stride_c;
#pragma unroll
  for (int i = 0; i < kThreadM; ++i)
#pragma unroll
    for (int j = 0; j < kThreadN; ++j) {
      const int64_t m = m0 + ty + i * (kTileM / kThreadM), n = n0 + tx + j * (kTileN / kThreadN);
      if (m < g.M && n < g.N) store_c(g, C, m, n, acc[i][j]);
    }
}

constexpr int kWmmaTile = 64;      // block tile of C
constexpr int kWmmaThreads = 128;  // 4 warps, 2x2, each owning 32x32 of the tile

// Block per 64x64 tile of C. Per step of 16 along k, the block stages op(A)'s 64x16 and op(B)'s 16x64
// slices in shared memory (row-major, zeros outside the matrices); each warp multiplies its 2x2 grid of
// 16x16 fragments in two k8 steps on the tensor cores, the inputs rounded to tf32 and accumulated in fp32.
// The accumulators then go through shared memory, so the epilogue (alpha, beta, edges) is plain code.
__global__ void __launch_bounds__(kWmmaThreads) gemm_tf32_kernel(GemmArgs g, int64_t tiles_n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // the host dispatches here only on sm_80 and later
#else
  using namespace nvcuda;
  // Shared-memory row lengths: multiples of 4 floats, as WMMA requires, padded against bank conflicts;
  // they keep every fragment's start 32-byte aligned.
  constexpr int kWmmaK = 16;  // the tile's step along k: two k8 steps of the tensor cores
  constexpr int kLdA = kWmmaK + 4, kLdB = kWmmaTile + 4, kLdC = kWmmaTile + 4;
  __shared__ __align__(32) float As[kWmmaTile][kLdA];
  __shared__ __align__(32) float Bs[kWmmaK][kLdB];
  __shared__ __align__(32) float Cs[kWmmaTile][kLdC];
  const int64_t m0 = int64_t(blockIdx.x / tiles_n) * kWmmaTile, n0 = int64_t(blockIdx.x % tiles_n) * kWmmaTile;
  const float* A = g.A + blockIdx.z * g.stride_a;
  const float* B = g.B + blockIdx.z * g.stride_b;
  const int tid = threadIdx.x, warp = tid / 32, wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  for (int64_t k0 = 0; k0 < g.K; k0 += kWmmaK) {
    for (int l = tid; l < kWmmaTile * kWmmaK; l += kWmmaThreads) {
      const int mi = g.trans_a ? l % kWmmaTile : l / kWmmaK, ki = g.trans_a ? l / kWmmaTile : l % kWmmaK;
      const int64_t m = m0 + mi, k = k0 + ki;
      As[mi][ki] = m < g.M && k < g.K ? load_a(g, A, m, k) : 0.f;
    }
    for (int l = tid; l < kWmmaK * kWmmaTile; l += kWmmaThreads) {
      const int ni = g.trans_b ? l / kWmmaK : l % kWmmaTile, ki = g.trans_b ? l % kWmmaK : l / kWmmaTile;
      const int64_t n = n0 + ni, k = k0 + ki;
      Bs[ki][ni] = n < g.N && k < g.K ? load_b(g, B, k, n) : 0.f;
    }
    __syncthreads();
    for (int kk = 0; kk < kWmmaK; kk += 8) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b[2];
      for (int i = 0; i < 2; ++i) {
        wmma::load_matrix_sync(a[i], &As[wm + 16 * i][kk], kLdA);
        for (int t = 0; t < a[i].num_elements; ++t) a[i].x[t] = wmma::__float_to_tf32(a[i].x[t]);
      }
      for (int j = 0; j < 2; ++j) {
        wmma::load_matrix_sync(b[j], &Bs[kk][wn + 16 * j], kLdB);
        for (int t = 0; t < b[j].num_elements; ++t) b[j].x[t] = wmma::__float_to_tf32(b[j].x[t]);
      }
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&Cs[wm + 16 * i][wn + 16 * j], acc[i][j], kLdC, wmma::mem_row_major);
  __syncthreads();
  float* C = g.C + blockIdx.z * g.stride_c;
  for (int l = tid; l < kWmmaTile * kWmmaTile; l += kWmmaThreads) {
    const int r = l / kWmmaTile, c = l % kWmmaTile;
    const int64_t m = m0 + r, n = n0 + c;
    if (m < g.M && n < g.N) store_c(g, C, m, n, Cs[r][c]);
  }
#endif
}

constexpr int64_t kMaxGridX = (int64_t(1) << 31) - 1;
constexpr int64_t kMaxGridZ = 65535;

// Launches one chunk of at most kMaxGridZ batches.
void launch(GemmAlgo algo, const GemmArgs& g, unsigned batches) {
  if (algo == GemmAlgo::Reference) {
    const int64_t blocks = ceil_div(g.M * g.N, kRefThreads);
    ENG_CHECK(blocks <= kMaxGridX, "cuda::gemm: ", g.M, "x", g.N, " outputs are too many for the Reference algorithm");
    gemm_reference_kernel<<<dim3(unsigned(blocks), 1, batches), kRefThreads>>>(g);
    return check_launch("gemm_reference_kernel");
  }
  const int tile = algo == GemmAlgo::Tiled ? kTileM : kWmmaTile;
  const int64_t tiles_n = ceil_div(g.N, tile), tiles = ceil_div(g.M, tile) * tiles_n;
  ENG_CHECK(tiles <= kMaxGridX, "cuda::gemm: ", g.M, "x", g.N, " outputs are too many tiles for one launch");
  if (algo == GemmAlgo::Tiled) {
    gemm_tiled_kernel<<<dim3(unsigned(tiles), 1, batches), kTiledThreads>>>(g, tiles_n);
    return check_launch("gemm_tiled_kernel");
  }
  gemm_tf32_kernel<<<dim3(unsigned(tiles), 1, batches), kWmmaThreads>>>(g, tiles_n);
  check_launch("gemm_tf32_kernel");
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
          int64_t stride_c, int64_t batch, GemmAlgo algo) {
  ENG_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "cuda::gemm: negative size M=", M, " N=", N, " K=", K,
            " batch=", batch);
  ENG_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K), "cuda::gemm: lda ", lda, " is below the row length of ",
            trans_a ? "A [K, M]" : "A [M, K]");
  ENG_CHECK(ldb >= std::max<int64_t>(1, trans_b ? K : N), "cuda::gemm: ldb ", ldb, " is below the row length of ",
            trans_b ? "B [N, K]" : "B [K, N]");
  ENG_CHECK(ldc >= std::max<int64_t>(1, N), "cuda::gemm: ldc ", ldc, " is below N = ", N);
  ENG_CHECK(stride_a >= 0 && stride_b >= 0, "cuda::gemm: negative batch stride (", stride_a, ", ", stride_b, ")");
  ENG_CHECK(batch <= 1 || M == 0 || N == 0 || stride_c >= (M - 1) * ldc + N, "cuda::gemm: stride_c ", stride_c,
            " makes the C matrices of different batches overlap");
  if (M == 0 || N == 0 || batch == 0) return;
  if (algo == GemmAlgo::Auto) algo = device_major() >= 8 ? GemmAlgo::Tf32 : GemmAlgo::Tiled;
  ENG_CHECK(algo == GemmAlgo::Reference || algo == GemmAlgo::Tiled || algo == GemmAlgo::Tf32,
            "cuda::gemm: unknown GemmAlgo ", int(algo));
  ENG_CHECK(algo != GemmAlgo::Tf32 || device_major() >= 8, "cuda::gemm: Tf32 needs tensor cores with tf32 ",
            "(compute capability 8.0 or later); this GPU is ", device_major(), ".x");
  GemmArgs g{trans_a, trans_b, M, N, K, alpha, beta, A, lda, stride_a, B, ldb, stride_b, C, ldc, stride_c};
  for (int64_t b0 = 0; b0 < batch; b0 += kMaxGridZ) {
    GemmArgs chunk = g;
    chunk.A += b0 * stride_a;
    chunk.B += b0 * stride_b;
    chunk.C += b0 * stride_c;
    launch(algo, chunk, unsigned(std::min(batch - b0, kMaxGridZ)));
  }
}

}  // namespace eng::cuda
