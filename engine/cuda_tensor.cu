// The device work Tensor, autograd and the optimizers need for themselves (engine/cuda.h): copies between
// views of any strides (contiguous() of a transposed or sliced CUDA view, writes into a slice), gradient
// accumulation, and the sum of squares and scaling of gradient clipping. Grid-stride loops, like the
// elementwise kernels of ops/cuda/.
#include <algorithm>
#include <vector>

#include "engine/cuda.h"
#include "engine/error.h"

namespace eng::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 16));
}

// The geometry of both sides, passed by value (kernel arguments live in constant memory).
struct CopyGeometry {
  int64_t shape[kMaxCopyDims];
  int64_t dst_strides[kMaxCopyDims];
  int64_t src_strides[kMaxCopyDims];
  int ndim;
};

// Element i in row-major logical order: its index along each dim, from the last one, gives both offsets.
// T is an unsigned integer of the element's size: the copy moves bits, whatever the dtype.
template <class T>
__global__ void copy_strided_kernel(T* dst, const T* src, int64_t n, CopyGeometry g) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    int64_t rest = i, d_off = 0, s_off = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const int64_t idx = rest % g.shape[d];
      rest /= g.shape[d];
      d_off += idx * g.dst_strides[d];
      s_off += idx * g.src_strides[d];
    }
    dst[d_off] = src[s_off];
  }
}

template <class T>
void launch_copy(void* dst, const void* src, int64_t n, const CopyGeometry& g) {
  copy_strided_kernel<<<blocks_for(n), kThreads>>>(static_cast<T*>(dst), static_cast<const T*>(src), n, g);
  check_launch("copy_strided_kernel");
}

__global__ void add_into_kernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    dst[i] += src[i];
}

// Elements per block of sum_squares: each block owns one fixed range and sums it in double.
constexpr int64_t kSquaresChunk = 1 << 14;

// Block b sums x[b chunk, (b + 1) chunk) squared: each thread a strided part in order, then a tree over the
// threads in shared memory. Fixed sizes, so the same order on every run.
__global__ void sum_squares_kernel(const float* x, int64_t n, double* partial) {
  __shared__ double acc[kThreads];
  const int64_t lo = blockIdx.x * kSquaresChunk, hi = min(n, lo + kSquaresChunk);
  double s = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) s += double(x[i]) * double(x[i]);
  acc[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) acc[threadIdx.x] += acc[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = acc[0];
}

__global__ void scale_kernel(float* x, int64_t n, double c) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    x[i] = float(__dmul_rn(double(x[i]), c));
}

}  // namespace

void copy_strided(void* dst, const int64_t* dst_strides, const void* src, const int64_t* src_strides,
                  const int64_t* shape, int ndim, size_t elem_size) {
  ENG_CHECK(ndim >= 0 && ndim <= kMaxCopyDims, "cuda::copy_strided: ", ndim, " dims; at most ", kMaxCopyDims);
  CopyGeometry g{};
  g.ndim = ndim;
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) {
    g.shape[d] = shape[d];
    g.dst_strides[d] = dst_strides[d];
    g.src_strides[d] = src_strides[d];
    n *= shape[d];
  }
  if (n == 0) return;
  switch (elem_size) {
    case 1: return launch_copy<uint8_t>(dst, src, n, g);
    case 2: return launch_copy<uint16_t>(dst, src, n, g);
    case 4: return launch_copy<uint32_t>(dst, src, n, g);
    case 8: return launch_copy<uint64_t>(dst, src, n, g);
    default: fail("cuda::copy_strided: elements of ", elem_size, " bytes; expected 1, 2, 4 or 8");
  }
}

void add_into(float* dst, const float* src, int64_t n) {
  if (n <= 0) return;
  add_into_kernel<<<blocks_for(n), kThreads>>>(dst, src, n);
  check_launch("add_into_kernel");
}

double sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0;
  const int64_t blocks = (n + kSquaresChunk - 1) / kSquaresChunk;
  const size_t bytes = size_t(blocks) * sizeof(double);
  double* partial = static_cast<double*>(allocate(bytes));
  std::vector<double> host(static_cast<size_t>(blocks));
  try {
    sum_squares_kernel<<<unsigned(blocks), kThreads>>>(x, n, partial);
    check_launch("sum_squares_kernel");
    copy_device_to_host(host.data(), partial, bytes);
  } catch (...) {
    release(partial, bytes);
    throw;
  }
  release(partial, bytes);
  double total = 0;
  for (double s : host) total += s;
  return total;
}

void scale(float* x, int64_t n, double c) {
  if (n <= 0) return;
  scale_kernel<<<blocks_for(n), kThreads>>>(x, n, c);
  check_launch("scale_kernel");
}

}  // namespace eng::cuda
