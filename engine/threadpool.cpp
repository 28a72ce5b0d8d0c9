#include "engine/threadpool.h"

#include <algorithm>
#include <atomic>
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

class Pool {
 public:
  explicit Pool(int n) {
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
      active_ = int(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return active_ == 0; });
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
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      work();
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex job_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t end_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  int active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
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
