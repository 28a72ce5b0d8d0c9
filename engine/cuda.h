// The CUDA runtime behind Device::CUDA: device discovery, a caching device allocator and host/device
// copies. This header has no CUDA types, so every file may include it. A CUDA=1 build compiles
// engine/cuda_runtime.cu; any other build compiles engine/cuda_host.cpp, where built() is false,
// device_count() is 0 and every other function throws eng::Error saying how to rebuild.
//
// One device (the current one, device 0 unless the process changes it) and one stream: all work goes
// to the legacy default stream, so work queued later always runs after work queued earlier. The
// allocator relies on that: a block released while a kernel may still read it can be handed out
// again at once, because whoever gets it can only touch it from later work on that same stream.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/allocator.h"

namespace eng::cuda {

// True only in a CUDA=1 build.
bool built();
// Number of usable devices: 0 when not built, when the driver is missing or too old, or when there is
// no GPU. Never throws; queried once.
int device_count();
// Why CUDA cannot be used ("eng was built without CUDA ...", "no CUDA device: <reason>"); empty when
// a device is usable.
std::string unavailable_reason();
// Compute capability major version of the current device (8 for A100, 9 for H100/H200); queried once.
int device_major();

// Caching device allocator, the device twin of engine/allocator.h: blocks are rounded up to 512 bytes
// (to 2 MiB above 1 MiB) and kept in a free pool when released. On cudaMalloc failure the pool is
// returned to the driver once and the allocation retried. Never returns null (throws eng::Error).
void* allocate(size_t bytes);
// Returns a block from allocate(); `bytes` is the size that was requested.
void release(void* p, size_t bytes);
AllocatorStats stats();
void reset_peak();
// Frees every cached block back to the driver.
void empty_cache();

// Blocking copies (cudaMemcpy; host pointers are ordinary pageable memory). Zero bytes is a no-op.
void copy_host_to_device(void* dst, const void* src, size_t bytes);
void copy_device_to_host(void* dst, const void* src, size_t bytes);
// Queued on the default stream after earlier work.
void copy_device_to_device(void* dst, const void* src, size_t bytes);
// Sets `bytes` bytes at dst to zero, queued on the default stream.
void memset_zero(void* dst, size_t bytes);

// Waits for all queued work; a failure (also an asynchronous one from an earlier kernel) throws
// eng::Error naming `op`.
void synchronize(const char* op);
// Throws eng::Error naming `kernel` when the last launch failed (cudaGetLastError). Called by the
// kernel wrappers in ops/cuda/ after each launch.
void check_launch(const char* kernel);

// Device work of the engine itself (engine/cuda_tensor.cu, engine/cuda_adam.cu): copies between views,
// gradient sums, the optimizer's updates. Queued on the default stream like the kernels of ops/cuda/.

// The most dimensions copy_strided takes.
constexpr int kMaxCopyDims = 8;
// dst[i] = src[i] for every logical index i of `shape` (ndim <= kMaxCopyDims dims), each side addressed
// through its own strides (in elements of elem_size bytes: 1, 2, 4 or 8) from its first element: a
// gather (strided source), a scatter (strided destination) or both. The two must not overlap.
void copy_strided(void* dst, const int64_t* dst_strides, const void* src, const int64_t* src_strides,
                  const int64_t* shape, int ndim, size_t elem_size);
// dst[i] += src[i] over n contiguous f32 elements (autograd's gradient accumulation).
void add_into(float* dst, const float* src, int64_t n);
// Sum of x[i]^2 over n f32 elements, in double, in a fixed order (blocks of a fixed size added in order):
// the same on every run. Waits for the result.
double sum_squares(const float* x, int64_t n);
// x[i] = float(double(x[i]) * c) over n f32 elements (gradient clipping).
void scale(float* x, int64_t n, double c);
// One Adam step (AdamW when decoupled) in place over n f32 elements, step >= 1 counting this update: the
// f32 path of engine/optim.cpp bit for bit (its AdamStep coefficients computed from the same doubles, and
// the scalar kernel's element math in double).
void adam_update(float* param, const float* grad, float* m, float* v, int64_t n, double lr, double beta1,
                 double beta2, double eps, double weight_decay, bool decoupled, int64_t step);

}  // namespace eng::cuda
