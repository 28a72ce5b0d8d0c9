// Row-wise softmax and log-softmax with their backwards. One block per row (a single warp for short rows):
// the threads stride over the row's columns, and the row's maximum and sums are block reductions (warp
// shuffles, then one value per warp through shared memory). In place is allowed (y = x, dx = dy): every
// thread reads the elements it writes, and the reductions finish reading before any write.
#include <cmath>

#include "engine/cuda.h"
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"

namespace eng::cuda {
namespace {

// Block per row: the maximum, the sum of exp(x - max), then y = exp(x - max) / sum, or
// (x - max) - log(sum) for log-softmax ((x - max) first: adding log(sum) to a large max would round it away).
__global__ void softmax_rows_kernel(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = block_reduce(m, MaxOp{}, -INFINITY);
    if (m == -INFINITY) {  // a fully masked row: (-inf) - (-inf) would be NaN
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = log ? -INFINITY : 0.f;
      continue;
    }
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(xr[j] - m);
    s = block_reduce(s, SumOp{}, 0.f);
    if (log) {
      const float log_s = logf(s);
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = (xr[j] - m) - log_s;
    } else {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = expf(xr[j] - m) / s;
    }
  }
}

// Block per row: t = sum(dy y) and dx = y (dy - t) for softmax; t = sum(dy) and dx = dy - exp(y) t for
// log-softmax. A fully masked row (y = 0, or y = -inf) gets dx = 0, or dx = dy, as on the CPU.
__global__ void softmax_rows_backward_kernel(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                                             bool log) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    float t = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) t += log ? dyr[j] : dyr[j] * yr[j];
    t = block_reduce(t, SumOp{}, 0.f);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      dxr[j] = log ? dyr[j] - expf(yr[j]) * t : yr[j] * (dyr[j] - t);
  }
}

}  // namespace

void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  if (rows <= 0 || cols <= 0) return;
  softmax_rows_kernel<<<row_blocks(rows), row_threads(cols)>>>(x, y, rows, cols, log);
  check_launch("softmax_rows_kernel");
}

void softmax_rows_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, bool log) {
  if (rows <= 0 || cols <= 0) return;
  softmax_rows_backward_kernel<<<row_blocks(rows), row_threads(cols)>>>(y, dy, dx, rows, cols, log);
  check_launch("softmax_rows_backward_kernel");
}

}  // namespace eng::cuda
