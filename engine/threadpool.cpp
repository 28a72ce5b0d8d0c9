#include "engine/threadpool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/cpu_features.h"
#include "engine/error.h"
#include "engine/parse_number.h"

namespace eng {
namespace {

thread_local bool t_in_parallel = false;

// Waking a sleeping thread costs 10-40 us on the virtual machines we measure on (futex wake, then the scheduler),
// more than many jobs: a generation step at batch 32 runs ~60 of ~30 us each per token. So a thread first polls,
// briefly with pause, then yielding its core (a machine busy with other work gets it back at once) until kSpin has
// passed, and only then sleeps.
constexpr auto kSpin = std::chrono::microseconds(50);

// Polls done() until it holds or kSpin has passed; true when it holds.
template <class F>
bool spin_until(F done) {
  const auto end = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (done()) return true;
    if (i < 64) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    if (i % 16 == 0 && std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
}

class Pool {
 public:
  // More threads than the hardware has would spin against the ones doing work: those sleep at once.
  explicit Pool(int n) : spin_(unsigned(n) <= std::thread::hardware_concurrency()) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return int(workers_.size()) + 1; }

  void run(int64_t begin, int64_t end, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard<std::mutex> job_lock(job_mu_);  // one job at a time
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      end_ = end;
      chunk_ = chunk;
      next_.store(begin);
      active_.store(int(workers_.size()));
      error_ = nullptr;
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    work();
    const auto all_done = [&] { return active_.load(std::memory_order_acquire) == 0; };
    if (spin_) spin_until(all_done);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, all_done);
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    t_in_parallel = true;
    for (;;) {
      int64_t lo = next_.fetch_add(chunk_);
      if (lo >= end_) break;
#if defined(__cpp_exceptions)
      try {
        (*fn_)(lo, std::min(end_, lo + chunk_));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        next_.store(end_);
      }
#else
      (*fn_)(lo, std::min(end_, lo + chunk_));  // a failed check calls the error handler, then aborts
#endif
    }
    t_in_parallel = false;
  }

  void loop() {
    uint64_t seen = 0;
    const auto woken = [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; };
    for (;;) {
      if (!spin_ || !spin_until(woken)) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, woken);
      }
      if (stop_) return;
      seen = generation_.load(std::memory_order_acquire);
      work();
      if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mu_);  // the caller tests active_ under mu_ before it sleeps
        done_cv_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex job_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t end_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  std::atomic<int> active_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  const bool spin_;
  std::exception_ptr error_;
};

int default_threads() {
  if (const char* e = std::getenv("ENG_THREADS")) return int(parse_int(e, IntRange{1, 1024}, "ENG_THREADS"));
  return std::max(1u, std::thread::hardware_concurrency());
}

// The pool starts before the first kernel runs, so it settles the kernel level too: a bad ENG_CPU is refused
// where a bad ENG_THREADS is, at a program's start, not from inside the first op that runs (a training step).
std::unique_ptr<Pool> start_pool(int n) {
  simd_level();
  return std::make_unique<Pool>(n);
}

std::mutex g_pool_mu;
std::unique_ptr<Pool> g_pool;

Pool& pool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) g_pool = start_pool(default_threads());
  return *g_pool;
}

}  // namespace

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  ENG_CHECK(n >= 1 && n <= 1024, "set_num_threads: expected 1..1024, got ", n);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (g_pool && g_pool->size() == n) return;
  g_pool.reset();
  g_pool = start_pool(n);
}

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t n = end - begin;
  Pool& p = pool();
  if (t_in_parallel || p.size() == 1 || n <= grain) {
    fn(begin, end);
    return;
  }
  // A few chunks per thread balance uneven work without much scheduling cost.
  int64_t chunk = std::max(grain, (n + 4 * p.size() - 1) / (4 * p.size()));
  p.run(begin, end, chunk, fn);
}

}  // namespace eng
