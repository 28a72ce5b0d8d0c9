// Column sums of a row-major matrix (the bias gradient), deterministic: see column_parts in
// ops/cuda/device_util.cuh for the two-pass split.
#include "engine/cuda.h"
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"

namespace eng::cuda {
namespace {

// Thread (column j, part blockIdx.y) sums rows [part chunk, (part + 1) chunk) of column j in row order
// into out[part, j]. Neighbouring threads read neighbouring columns, so each row is read coalesced.
__global__ void column_sums_kernel(const float* x, float* out, int64_t rows, int64_t cols, int64_t chunk) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  const int64_t lo = blockIdx.y * chunk, hi = min(rows, lo + chunk);
  float s = 0.f;
  for (int64_t r = lo; r < hi; ++r) s += x[r * cols + j];
  out[blockIdx.y * cols + j] = s;
}

void column_sums(const float* x, float* out, int64_t rows, int64_t cols, int64_t parts) {
  const int64_t chunk = ceil_div(rows, parts);
  column_sums_kernel<<<dim3(unsigned(ceil_div(cols, kThreads)), unsigned(parts)), kThreads>>>(x, out, rows, cols,
                                                                                              chunk);
  check_launch("column_sums_kernel");
}

}  // namespace

void sum_rows(const float* x, float* out, int64_t rows, int64_t cols) {
  if (cols <= 0) return;
  const int64_t parts = column_parts(rows);
  if (parts == 1) return column_sums(x, out, rows, cols, 1);
  Scratch partial(parts * cols);
  column_sums(x, partial.get(), rows, cols, parts);
  column_sums(partial.get(), out, parts, cols, 1);
}

}  // namespace eng::cuda
