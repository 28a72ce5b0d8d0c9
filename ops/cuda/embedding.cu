// Embedding lookup and its gradient: one thread per element of the [n_ids, dim] output (a grid-stride
// loop), so that neighbouring threads copy neighbouring floats of one row.
#include "engine/cuda.h"
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"

namespace eng::cuda {
namespace {

// out[i, d] = weight[ids[i], d], or 0 for an id outside [0, vocab).
__global__ void embedding_gather_kernel(const float* weight, const int64_t* ids, float* out, int64_t n_ids,
                                        int64_t vocab, int64_t dim) {
  const int64_t n = n_ids * dim;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(blockDim.x) * gridDim.x) {
    const int64_t i = k / dim, id = ids[i];
    out[k] = id >= 0 && id < vocab ? weight[id * dim + (k - i * dim)] : 0.f;
  }
}

// dweight[ids[i], d] += dout[i, d]; atomic because ids repeat, skipping ids outside [0, vocab).
__global__ void embedding_scatter_add_kernel(const float* dout, const int64_t* ids, float* dweight, int64_t n_ids,
                                             int64_t vocab, int64_t dim) {
  const int64_t n = n_ids * dim;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(blockDim.x) * gridDim.x) {
    const int64_t i = k / dim, id = ids[i];
    if (id >= 0 && id < vocab) atomicAdd(dweight + id * dim + (k - i * dim), dout[k]);
  }
}

}  // namespace

void embedding_gather(const float* weight, const int64_t* ids, float* out, int64_t n_ids, int64_t vocab,
                      int64_t dim) {
  if (n_ids <= 0 || dim <= 0) return;
  embedding_gather_kernel<<<grid_for(n_ids * dim, kThreads), kThreads>>>(weight, ids, out, n_ids, vocab, dim);
  check_launch("embedding_gather_kernel");
}

void embedding_scatter_add(const float* dout, const int64_t* ids, float* dweight, int64_t n_ids, int64_t vocab,
                           int64_t dim) {
  if (n_ids <= 0 || dim <= 0) return;
  embedding_scatter_add_kernel<<<grid_for(n_ids * dim, kThreads), kThreads>>>(dout, ids, dweight, n_ids, vocab, dim);
  check_launch("embedding_scatter_add_kernel");
}

}  // namespace eng::cuda
