// Layer norm and RMS norm over the rows of a matrix, with their backwards. The row kernels use one block
// per row and block reductions for the statistics; the weight and bias gradients are column sums over
// rows, done deterministically in two passes (a partial sum per chunk of rows, then sum_rows of the
// partials) instead of with atomics.
#include "engine/cuda.h"
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"

namespace eng::cuda {
namespace {

// Block per row: mean (layer norm only), the mean square about it, rstd, then y. Two passes over x for
// the variance, as the CPU, rather than E[x^2] - mean^2, which cancels when |mean| >> std.
__global__ void layer_norm_rows_kernel(const float* x, const float* w, const float* b, float* y, float* mean,
                                       float* rstd, int64_t rows, int64_t cols, float eps, bool rms) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float mu = 0.f;
    if (!rms) {
      float s = 0.f;
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
      mu = block_reduce(s, SumOp{}, 0.f) / float(cols);
    }
    float ss = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) ss += (xr[j] - mu) * (xr[j] - mu);
    const float rs = 1.f / sqrtf(block_reduce(ss, SumOp{}, 0.f) / float(cols) + eps);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float v = (xr[j] - mu) * rs;
      if (w) v *= w[j];
      if (b) v += b[j];
      yr[j] = v;
    }
    if (threadIdx.x == 0) {
      if (mean) mean[r] = mu;
      if (rstd) rstd[r] = rs;
    }
  }
}

// Block per row, with dn = dy w and xhat = (x - mean) rstd:
//   dx = rstd (dn - mean(dn) - xhat mean(dn xhat)), without the mean(dn) term for RMS norm.
__global__ void layer_norm_rows_backward_kernel(const float* dy, const float* x, const float* w, const float* mean,
                                                const float* rstd, float* dx, int64_t rows, int64_t cols, bool rms) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    float* dxr = dx + r * cols;
    const float mu = rms ? 0.f : mean[r], rs = rstd[r];
    float sum_dn = 0.f, sum_dn_xhat = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float dn = w ? dyr[j] * w[j] : dyr[j];
      sum_dn += dn;
      sum_dn_xhat += dn * ((xr[j] - mu) * rs);
    }
    const float mean_dn = rms ? 0.f : block_reduce(sum_dn, SumOp{}, 0.f) / float(cols);
    const float mean_dn_xhat = block_reduce(sum_dn_xhat, SumOp{}, 0.f) / float(cols);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float dn = w ? dyr[j] * w[j] : dyr[j];
      dxr[j] = rs * (dn - mean_dn - ((xr[j] - mu) * rs) * mean_dn_xhat);
    }
  }
}

// Thread (column j, part blockIdx.y) sums dy xhat and dy over rows [part chunk, (part + 1) chunk) of
// column j into dw_part[part, j] and db_part[part, j] (each may be null).
__global__ void norm_param_partials_kernel(const float* dy, const float* x, const float* mean, const float* rstd,
                                           float* dw_part, float* db_part, int64_t rows, int64_t cols, int64_t chunk,
                                           bool rms) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  const int64_t lo = blockIdx.y * chunk, hi = min(rows, lo + chunk);
  float sw = 0.f, sb = 0.f;
  for (int64_t r = lo; r < hi; ++r) {
    const float g = dy[r * cols + j];
    sw += g * ((x[r * cols + j] - (rms ? 0.f : mean[r])) * rstd[r]);
    sb += g;
  }
  if (dw_part) dw_part[blockIdx.y * cols + j] = sw;
  if (db_part) db_part[blockIdx.y * cols + j] = sb;
}

}  // namespace

void layer_norm_rows(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd, int64_t rows,
                     int64_t cols, float eps, bool rms) {
  if (rows <= 0 || cols <= 0) return;
  layer_norm_rows_kernel<<<row_blocks(rows), row_threads(cols)>>>(x, w, b, y, mean, rstd, rows, cols, eps, rms);
  check_launch("layer_norm_rows_kernel");
}

void layer_norm_rows_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                              float* dx, float* dw, float* db, int64_t rows, int64_t cols, bool rms) {
  if (cols <= 0) return;
  if (dw || db) {  // before dx, so that dx may share dy's memory
    const int64_t parts = column_parts(rows), chunk = ceil_div(rows, parts);
    Scratch partial((dw ? parts * cols : 0) + (db ? parts * cols : 0));
    float* dw_part = dw ? partial.get() : nullptr;
    float* db_part = db ? partial.get() + (dw ? parts * cols : 0) : nullptr;
    norm_param_partials_kernel<<<dim3(unsigned(ceil_div(cols, kThreads)), unsigned(parts)), kThreads>>>(
        dy, x, mean, rstd, dw_part, db_part, rows, cols, chunk, rms);
    check_launch("norm_param_partials_kernel");
    if (dw) sum_rows(dw_part, dw, parts, cols);
    if (db) sum_rows(db_part, db, parts, cols);
  }
  if (rows <= 0) return;
  layer_norm_rows_backward_kernel<<<row_blocks(rows), row_threads(cols)>>>(dy, x, w, mean, rstd, dx, rows, cols, rms);
  check_launch("layer_norm_rows_backward_kernel");
}

}  // namespace eng::cuda
