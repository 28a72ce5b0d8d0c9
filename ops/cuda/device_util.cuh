// Helpers shared by the kernels of ops/cuda/: launch sizes, scratch memory, and sums and maxima over a
// warp or a block.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/cuda.h"
#include "engine/error.h"

namespace eng::cuda {

constexpr int kThreads = 256;  // threads per block of the elementwise kernels

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over n > 0 items: enough to fill any current GPU many times over; the
// loop covers what a capped grid does not.
inline unsigned grid_for(int64_t n, int threads) {
  return unsigned(std::min<int64_t>(ceil_div(n, threads), int64_t(1) << 16));
}

// Blocks for one-block-per-row kernels (they loop over rows with a stride of gridDim.x); rows > 0.
inline unsigned row_blocks(int64_t rows) { return unsigned(std::min<int64_t>(rows, int64_t(1) << 16)); }

// Threads for one block per row of `cols`: a single warp for short rows, more for long ones.
inline int row_threads(int64_t cols) { return cols <= 64 ? 32 : cols <= 1024 ? 128 : 512; }

// Column sums over many rows run in two passes for parallelism: `column_parts(rows)` chunks of consecutive
// rows are summed into partial rows, which are then summed. The split depends on rows only, so the result
// is the same on every run (no atomics).
inline int64_t column_parts(int64_t rows) { return std::max<int64_t>(1, std::min<int64_t>(128, ceil_div(rows, 32))); }

// Floats of device memory from the caching allocator for the length of one call. It goes back to the pool
// while kernels using it may still be queued; that is safe on the single default stream (engine/cuda.h).
class Scratch {
 public:
  explicit Scratch(int64_t count) : bytes_(size_t(count) * sizeof(float)), p_(static_cast<float*>(allocate(bytes_))) {}
  ~Scratch() { release(p_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const { return p_; }

 private:
  size_t bytes_;
  float* p_;
};

// Lets `kernel` use `floats` floats of dynamic shared memory (beyond the 48 KiB default, up to the GPU's
// opt-in limit: 227 KiB on the H100/H200, 163 KiB on the A100; the attention kernels need at most 147 KiB).
template <class Kernel>
void allow_shared(Kernel kernel, int64_t floats, const char* name) {
  const int64_t bytes = floats * int64_t(sizeof(float));
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear it, so that the next check_launch does not report it again
    fail(name, ": cannot use ", bytes, " bytes of shared memory: ", cudaGetErrorString(e));
  }
}

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Every lane of the (full) warp gets the reduction of the 32 values.
template <class Op>
__device__ float warp_reduce(float v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Every thread of the block gets the reduction of one value per thread. blockDim.x must be a multiple of
// 32 (at most 1024), and every thread must call it: it synchronises the block. The first barrier makes
// the shared slots safe to reuse by the next call.
template <class Op>
__device__ float block_reduce(float v, Op op, float identity) {
  __shared__ float partial[32];
  __shared__ float result;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? partial[lane] : identity;
    v = warp_reduce(v, op);
    if (lane == 0) result = v;
  }
  __syncthreads();
  return result;
}

}  // namespace eng::cuda
