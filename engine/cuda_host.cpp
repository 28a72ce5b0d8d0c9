// engine/cuda.h in a build without CUDA (the default `make`): nothing is available, and every function
// that would touch a device says so and how to get one, instead of crashing.
#include "engine/cuda.h"

#include "engine/error.h"

namespace eng::cuda {
namespace {

[[noreturn]] void not_built(const char* function) {
  fail("cuda::", function, ": eng was built without CUDA; rebuild with make CUDA=1");
}

}  // namespace

bool built() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return "eng was built without CUDA (rebuild with make CUDA=1)"; }
int device_major() { not_built("device_major"); }

void* allocate(size_t) { not_built("allocate"); }
void release(void*, size_t) { not_built("release"); }
AllocatorStats stats() { not_built("stats"); }
void reset_peak() { not_built("reset_peak"); }
void empty_cache() { not_built("empty_cache"); }

void copy_host_to_device(void*, const void*, size_t) { not_built("copy_host_to_device"); }
void copy_device_to_host(void*, const void*, size_t) { not_built("copy_device_to_host"); }
void copy_device_to_device(void*, const void*, size_t) { not_built("copy_device_to_device"); }
void memset_zero(void*, size_t) { not_built("memset_zero"); }

void synchronize(const char*) { not_built("synchronize"); }
void check_launch(const char*) { not_built("check_launch"); }

void copy_strided(void*, const int64_t*, const void*, const int64_t*, const int64_t*, int, size_t) {
  not_built("copy_strided");
}
void add_into(float*, const float*, int64_t) { not_built("add_into"); }
double sum_squares(const float*, int64_t) { not_built("sum_squares"); }
void scale(float*, int64_t, double) { not_built("scale"); }
void adam_update(float*, const float*, float*, float*, int64_t, double, double, double, double, double, bool, int64_t) {
  not_built("adam_update");
}

}  // namespace eng::cuda
