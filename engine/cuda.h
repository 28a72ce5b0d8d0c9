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

}  // namespace eng::cuda
