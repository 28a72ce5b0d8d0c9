// engine/cuda.h in a CUDA=1 build: device discovery, the caching device allocator and the copies, over
// the CUDA runtime API. cudaMalloc and cudaFree synchronise the device and cost tens of microseconds,
// so freed blocks are kept in a pool and handed out again, as the host allocator does for fresh pages.
#include <cuda_runtime.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "engine/cuda.h"
#include "engine/error.h"

// Throws eng::Error naming the call text, the operation and the runtime's description of the error.
#define ENG_CUDA_CHECK(call, op)                                                                \
  do {                                                                                          \
    const cudaError_t eng_cuda_status_ = (call);                                                \
    if (eng_cuda_status_ != cudaSuccess) ::eng::cuda::fail_call(eng_cuda_status_, #call, op);   \
  } while (0)

namespace eng::cuda {
namespace {

// Clears the runtime's last error (so a later check does not report it again) and throws.
[[noreturn]] void fail_call(cudaError_t status, const char* call, const char* op) {
  (void)cudaGetLastError();
  fail(op, ": ", call, " failed: ", cudaGetErrorString(status));
}

struct Probe {
  int count = 0;
  std::string reason;  // empty when count > 0
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      r.reason = std::string("no CUDA device: ") + cudaGetErrorString(e);
    } else if (n == 0) {
      r.reason = "no CUDA device: cudaGetDeviceCount found none";
    } else {
      r.count = n;
    }
    return r;
  }();
  return p;
}

void require_device(const char* op) { ENG_CHECK(probe().count > 0, op, ": ", probe().reason); }

constexpr size_t kSmallQuantum = 512;             // cudaMalloc itself aligns to 256 bytes
constexpr size_t kLargeThreshold = size_t(1) << 20;
constexpr size_t kLargeQuantum = size_t(2) << 20;  // large blocks in 2 MiB steps, so near sizes share them

size_t round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t q = bytes <= kLargeThreshold ? kSmallQuantum : kLargeQuantum;
  return (bytes + q - 1) / q * q;
}

struct Pool {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;  // rounded size -> block
  std::map<void*, size_t> block_size;        // every block we own, handed out or cached
  AllocatorStats st;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: tensors in static storage may outlive it
  return *p;
}

// Frees every cached block; all are dropped from the pool even if one cudaFree fails.
void free_cache_locked(Pool& P, const char* op) {
  cudaError_t first = cudaSuccess;
  for (auto& [sz, blk] : P.free_blocks) {
    P.block_size.erase(blk);
    const cudaError_t e = cudaFree(blk);
    if (first == cudaSuccess) first = e;
  }
  P.free_blocks.clear();
  P.st.cached_bytes = 0;
  if (first != cudaSuccess) fail_call(first, "cudaFree(cached block)", op);
}

}  // namespace

bool built() { return true; }

int device_count() { return probe().count; }

std::string unavailable_reason() { return probe().reason; }

int device_major() {
  require_device("cuda::device_major");
  static const int major = [] {
    int dev = 0, m = 0;
    ENG_CUDA_CHECK(cudaGetDevice(&dev), "cuda::device_major");
    ENG_CUDA_CHECK(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev), "cuda::device_major");
    return m;
  }();
  return major;
}

void* allocate(size_t bytes) {
  require_device("cuda::allocate");
  Pool& P = pool();
  const size_t want = round_size(bytes);
  std::lock_guard<std::mutex> lock(P.mu);
  P.st.allocs++;
  void* p = nullptr;
  size_t got = want;
  // A cached block is reused for a request of at least half its size, as on the host.
  auto it = P.free_blocks.lower_bound(want);
  if (it != P.free_blocks.end() && it->first <= 2 * want) {
    got = it->first;
    p = it->second;
    P.free_blocks.erase(it);
    P.st.cached_bytes -= got;
    P.st.cache_hits++;
  } else {
    const size_t cached = P.st.cached_bytes;
    cudaError_t e = cudaMalloc(&p, want);
    if (e == cudaErrorMemoryAllocation && !P.free_blocks.empty()) {  // give the cache back and retry once
      (void)cudaGetLastError();
      free_cache_locked(P, "cuda::allocate");
      e = cudaMalloc(&p, want);
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail("cuda::allocate: cudaMalloc of ", want, " bytes (", bytes, " requested) failed: ", cudaGetErrorString(e),
           " (live ", P.st.live_bytes, " bytes, cached ", cached, " bytes before emptying the cache)");
    }
    P.block_size[p] = want;
  }
  P.st.live_bytes += got;
  if (P.st.live_bytes > P.st.peak_bytes) P.st.peak_bytes = P.st.live_bytes;
  return p;
}

void release(void* p, size_t) {
  if (!p) return;
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  auto it = P.block_size.find(p);
  if (it == P.block_size.end()) std::abort();  // not ours: memory corruption, stop now
  const size_t sz = it->second;
  P.st.live_bytes -= sz;
  P.free_blocks.emplace(sz, p);
  P.st.cached_bytes += sz;
}

AllocatorStats stats() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  return P.st;
}

void reset_peak() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  P.st.peak_bytes = P.st.live_bytes;
}

void empty_cache() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  free_cache_locked(P, "cuda::empty_cache");
}

void copy_host_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  ENG_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cuda::copy_host_to_device");
}

void copy_device_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  ENG_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cuda::copy_device_to_host");
}

void copy_device_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  ENG_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cuda::copy_device_to_device");
}

void memset_zero(void* dst, size_t bytes) {
  if (bytes == 0) return;
  ENG_CUDA_CHECK(cudaMemset(dst, 0, bytes), "cuda::memset_zero");
}

void synchronize(const char* op) { ENG_CUDA_CHECK(cudaDeviceSynchronize(), op); }

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(kernel, ": kernel launch failed: ", cudaGetErrorString(e));
}

}  // namespace eng::cuda
