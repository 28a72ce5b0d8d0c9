// Counts the heap allocations made through operator new, every form, while counting is on: the proof that a loop
// allocates nothing (tests/test_generator.cpp, `embed --stats`). The engine's own allocator counts its blocks in
// allocator::stats(); malloc called directly is not counted (the engine calls it only inside that allocator).
//
// Replacing the global operator new is a choice for a whole program, so this header defines the replacements and
// is included by exactly one source file of a program, never by the library. Counting is off by default, and then
// an allocation costs one relaxed atomic load more. The replacements allocate with malloc / aligned_alloc, so they
// run under AddressSanitizer, which intercepts those.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace eng::heap_count {

inline std::atomic<bool> counting{false};
inline std::atomic<uint64_t> count{0};

// Counts the operator new calls of every thread between its construction and allocations().
class Scope {
 public:
  Scope() {
    count.store(0);
    counting.store(true);
  }
  ~Scope() { counting.store(false); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  uint64_t allocations() const { return count.load(); }
};

inline void* allocate(std::size_t n, std::size_t align, bool nothrow) {
  if (counting.load(std::memory_order_relaxed)) count.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  for (;;) {  // as the standard operator new: the new-handler, then bad_alloc (abort without exceptions)
    void* p = align <= alignof(std::max_align_t) ? std::malloc(n)
                                                  : std::aligned_alloc(align, (n + align - 1) / align * align);
    if (p || nothrow) return p;
    const std::new_handler handler = std::get_new_handler();
#if defined(__cpp_exceptions)
    if (!handler) throw std::bad_alloc();
#else
    if (!handler) std::abort();
#endif
    handler();
  }
}

}  // namespace eng::heap_count

// These deletes free what these news got from malloc; GCC, inlining them into the standard containers of this
// file, takes free() for a mismatch with operator new.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) { return eng::heap_count::allocate(n, 0, false); }
void* operator new[](std::size_t n) { return eng::heap_count::allocate(n, 0, false); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return eng::heap_count::allocate(n, 0, true); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return eng::heap_count::allocate(n, 0, true); }
void* operator new(std::size_t n, std::align_val_t a) { return eng::heap_count::allocate(n, std::size_t(a), false); }
void* operator new[](std::size_t n, std::align_val_t a) { return eng::heap_count::allocate(n, std::size_t(a), false); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return eng::heap_count::allocate(n, std::size_t(a), true);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return eng::heap_count::allocate(n, std::size_t(a), true);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
