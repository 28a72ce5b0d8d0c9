// Softmax cross-entropy per row of logits against integer targets, with its backward. The forward is one
// block per row (a block maximum and a block sum for the log-sum-exp); the backward needs no reduction, as
// it reuses the saved log-sum-exp, and also runs one block per row so that each row's target is read once.
#include <cmath>

#include "engine/cuda.h"
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"

namespace eng::cuda {
namespace {

// Block per row: lse = max + log(sum(exp(x - max))); thread 0 writes lse and the row's loss.
__global__ void cross_entropy_rows_kernel(const float* logits, const int64_t* targets, float* loss, float* lse,
                                          int64_t rows, int64_t vocab, int64_t ignore_index) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = logits + r * vocab;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = block_reduce(m, MaxOp{}, -INFINITY);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) s += expf(xr[j] - m);
    const float l = m + logf(block_reduce(s, SumOp{}, 0.f));
    if (threadIdx.x == 0) {
      const int64_t t = targets[r];
      lse[r] = l;
      loss[r] = t == ignore_index ? 0.f : t >= 0 && t < vocab ? l - xr[t] : NAN;
    }
  }
}

// Block per row: dlogits = dloss (exp(x - lse) - [j == target]), or zeros for an ignored target.
__global__ void cross_entropy_rows_backward_kernel(const float* logits, const int64_t* targets, const float* lse,
                                                   const float* dloss, float* dlogits, int64_t rows, int64_t vocab,
                                                   int64_t ignore_index) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = logits + r * vocab;
    float* dr = dlogits + r * vocab;
    const int64_t t = targets[r];
    const bool skip = t == ignore_index || t < 0 || t >= vocab;
    const float g = dloss[r], l = lse[r];
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      dr[j] = skip ? 0.f : g * (expf(xr[j] - l) - (j == t ? 1.f : 0.f));
  }
}

}  // namespace

void cross_entropy_rows(const float* logits, const int64_t* targets, float* loss, float* lse, int64_t rows,
                        int64_t vocab, int64_t ignore_index) {
  if (rows <= 0) return;
  cross_entropy_rows_kernel<<<row_blocks(rows), row_threads(vocab)>>>(logits, targets, loss, lse, rows, vocab,
                                                                       ignore_index);
  check_launch("cross_entropy_rows_kernel");
}

void cross_entropy_rows_backward(const float* logits, const int64_t* targets, const float* lse, const float* dloss,
                                 float* dlogits, int64_t rows, int64_t vocab, int64_t ignore_index) {
  if (rows <= 0 || vocab <= 0) return;
  cross_entropy_rows_backward_kernel<<<row_blocks(rows), row_threads(vocab)>>>(logits, targets, lse, dloss, dlogits,
                                                                                rows, vocab, ignore_index);
  check_launch("cross_entropy_rows_backward_kernel");
}

}  // namespace eng::cuda
