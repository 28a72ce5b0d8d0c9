#include "engine/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "engine/error.h"

namespace eng::allocator {
namespace {

constexpr size_t kAlign = 64;

// Blocks are rounded to 64 bytes below 1 MiB and to 64 KiB above, so that tensors of nearly
// equal size share blocks; a cached block is reused for a request of at least half its size.
size_t round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t q = bytes < (size_t(1) << 20) ? kAlign : (size_t(1) << 16);
  return (bytes + q - 1) / q * q;
}

struct Pool {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;  // rounded size -> block
  std::map<void*, size_t> block_size;        // every block we own, handed out or cached
  AllocatorStats st;
  size_t limit = 0;  // 0: none
  std::string limit_reason;
#ifdef ENG_SANITIZE
  bool caching = false;
#else
  bool caching = true;
#endif
};

// Blocks of 128 KiB and more (where glibc's malloc maps pages too) are anonymous mappings of their own, without
// the header malloc writes into their first page: a block nothing writes to holds no memory, as for the weights of
// a model built only to be bound to a mapped checkpoint (engine/skip_init.h; 4 KiB per tensor otherwise). Under
// the sanitizers every block comes from malloc, which AddressSanitizer guards.
#ifdef ENG_SANITIZE
constexpr size_t kMapped = SIZE_MAX;
#else
constexpr size_t kMapped = size_t(128) << 10;
#endif

void* new_block(size_t bytes) {
  if (bytes < kMapped) return std::aligned_alloc(kAlign, bytes);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void delete_block(void* p, size_t bytes) {
  if (bytes < kMapped)
    std::free(p);
  else
    ::munmap(p, bytes);
}

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: tensors in static storage may outlive it
  return *p;
}

void free_cache_locked(Pool& P) {
  for (auto& [sz, blk] : P.free_blocks) {
    P.block_size.erase(blk);
    delete_block(blk, sz);
  }
  P.free_blocks.clear();
  P.st.cached_bytes = 0;
}

}  // namespace

void* allocate(size_t bytes) {
  Pool& P = pool();
  size_t want = round_size(bytes);
  std::lock_guard<std::mutex> lock(P.mu);
  P.st.allocs++;
  void* p = nullptr;
  size_t got = want;
  if (P.caching) {
    auto it = P.free_blocks.lower_bound(want);
    if (it != P.free_blocks.end() && it->first <= 2 * want) {
      got = it->first;
      p = it->second;
      P.free_blocks.erase(it);
      P.st.cached_bytes -= got;
      P.st.cache_hits++;
    }
  }
  if (!p) {
    if (P.limit && P.st.live_bytes + P.st.cached_bytes + want > P.limit) free_cache_locked(P);
    ENG_CHECK(!P.limit || P.st.live_bytes + want <= P.limit, "allocator: out of memory allocating ", bytes,
              " bytes (live ", P.st.live_bytes, " bytes, limit ", P.limit, " bytes: ", P.limit_reason, ")");
    p = new_block(want);
    if (!p && !P.free_blocks.empty()) {  // out of memory: give the cache back and retry once
      free_cache_locked(P);
      p = new_block(want);
    }
    ENG_CHECK(p, "allocator: out of memory allocating ", bytes, " bytes (live ", P.st.live_bytes,
              " bytes)");
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
  size_t sz = it->second;
  P.st.live_bytes -= sz;
  if (P.caching) {
    P.free_blocks.emplace(sz, p);
    P.st.cached_bytes += sz;
  } else {
    P.block_size.erase(it);
    delete_block(p, sz);
  }
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
  free_cache_locked(P);
}

void set_caching(bool on) {
  if (!on) empty_cache();
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  P.caching = on;
}

void set_limit(size_t bytes, const std::string& reason) {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  P.limit = bytes;
  P.limit_reason = reason;
}

size_t available_system_memory() {
  if (std::FILE* in = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, in)) found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    std::fclose(in);
    if (found) return size_t(kib) * 1024;
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
}

bool caching() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  return P.caching;
}

}  // namespace eng::allocator
