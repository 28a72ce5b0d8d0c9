// One thread pool for the whole engine (two pools spinning against each other on 2 cores cost more
// than they give). Between jobs, workers (and the caller waiting for them) poll for 50 us, yielding the core,
// then sleep on a condition variable; with more threads than hardware threads they sleep at once. The thread
// count comes from set_num_threads(), else the ENG_THREADS environment variable, else the number of
// hardware threads. A parallel_for inside a parallel_for runs serially on the calling thread.
// Starting the pool (the first of these calls) throws eng::Error on an ENG_THREADS that is not a whole integer
// in 1..1024 or an ENG_CPU level this CPU cannot run (engine/cpu_features.h).
#pragma once
#include <cstdint>
#include <functional>

namespace eng {

int num_threads();
void set_num_threads(int n);

// Splits [begin, end) into chunks of at least `grain` iterations and calls fn(lo, hi) on each,
// spread over the pool; returns when all are done. An exception thrown by fn is rethrown here.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace eng
