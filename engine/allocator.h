// Caching host allocator. Freed blocks are kept in a size-ordered pool and handed out again:
// on these machines the first touch of a fresh page costs ~12 us, so returning memory to the OS
// each step would dominate small training steps. Live and peak counters are what the benchmarks
// report as memory use.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace eng {

struct AllocatorStats {
  size_t live_bytes = 0;    // bytes in blocks currently handed out
  size_t peak_bytes = 0;    // max of live_bytes since the last reset_peak()
  size_t cached_bytes = 0;  // bytes held in the free pool
  uint64_t allocs = 0;      // allocate() calls
  uint64_t cache_hits = 0;  // of which were served from the pool
};

namespace allocator {

// Returns a 64-byte aligned block of at least `bytes` bytes (never null; throws eng::Error).
void* allocate(size_t bytes);
// Returns a block from allocate(); `bytes` must be the size that was requested.
void release(void* p, size_t bytes);

AllocatorStats stats();
void reset_peak();
// Frees every cached block back to the OS.
void empty_cache();
// Caching is on by default, off in sanitizer builds (so that AddressSanitizer sees
// use-after-free); tests switch it explicitly.
void set_caching(bool on);
bool caching();
// Refuses, with an error that gives `reason`, an allocation that would take the bytes handed out beyond `bytes`
// (0: no limit, the default): a program that knows how much memory it may use fails with a message instead of
// being killed by the kernel's out-of-memory killer.
void set_limit(size_t bytes, const std::string& reason);
// The memory the system could give this process now (Linux's MemAvailable; else the physical memory; 0 when
// neither is known).
size_t available_system_memory();

}  // namespace allocator
}  // namespace eng
