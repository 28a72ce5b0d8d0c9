// bench gemm --device cuda: TFLOP/s of our CUDA GEMM (ops/cuda/gemm.cu: fp32 tiles and tf32 tensor cores) on
// square and transformer shapes, and with --vs cublas the same products through cuBLAS, loaded at run time with
// dlopen (libcublas.so.13/.12/.so from the CUDA toolkit): no build or link dependency, and only this benchmark
// touches it. cuBLAS runs in fp32 (its default math) and in tf32 (CUBLAS_TF32_TENSOR_OP_MATH), each pair timed
// alternately on the same operands so that both see the same GPU state.
#include "tools/bench/gemm_cuda.h"

#include "engine/error.h"

#ifdef ENG_CUDA
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "engine/cuda.h"
#include "engine/rng.h"
#include "engine/tensor.h"
#include "ops/cuda/kernels.h"

namespace eng {
namespace {

// The cuBLAS entry points we call, declared from the cuBLAS API (cublas_api.h is not needed to build): status 0
// is CUBLAS_STATUS_SUCCESS, operation 0 is CUBLAS_OP_N, math mode 0 CUBLAS_DEFAULT_MATH and 3
// CUBLAS_TF32_TENSOR_OP_MATH.
struct CuBlas {
  using Handle = void*;
  int (*create)(Handle*) = nullptr;
  int (*set_math_mode)(Handle, int) = nullptr;
  int (*sgemm)(Handle, int, int, int, int, int, const float*, const float*, int, const float*, int, const float*,
               float*, int) = nullptr;
  int (*get_version)(Handle, int*) = nullptr;
  Handle handle = nullptr;

  static CuBlas load() {
    void* lib = nullptr;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    ENG_CHECK(lib, "bench gemm --vs cublas: cannot load libcublas.so.13, .12 or .so (", dlerror(),
              "); it comes with the CUDA toolkit (add its lib64 to LD_LIBRARY_PATH)");
    CuBlas c;
    c.create = reinterpret_cast<int (*)(Handle*)>(dlsym(lib, "cublasCreate_v2"));
    c.set_math_mode = reinterpret_cast<int (*)(Handle, int)>(dlsym(lib, "cublasSetMathMode"));
    c.sgemm = reinterpret_cast<decltype(c.sgemm)>(dlsym(lib, "cublasSgemm_v2"));
    c.get_version = reinterpret_cast<int (*)(Handle, int*)>(dlsym(lib, "cublasGetVersion_v2"));
    ENG_CHECK(c.create && c.set_math_mode && c.sgemm && c.get_version, "bench gemm: libcublas lacks a symbol");
    ENG_CHECK(c.create(&c.handle) == 0, "bench gemm: cublasCreate failed");
    return c;
  }
  void check(int status, const char* call) const {
    ENG_CHECK(status == 0, "bench gemm: ", call, " returned cuBLAS status ", status);
  }
  // Row-major C [M, N] = A [M, K] B [K, N] is column-major C^T = B^T A^T: cuBLAS multiplies B by A.
  void gemm(bool tf32, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) const {
    const float one = 1.f, zero = 0.f;
    check(set_math_mode(handle, tf32 ? 3 : 0), "cublasSetMathMode");
    check(sgemm(handle, 0, 0, int(N), int(M), int(K), &one, B, int(N), A, int(K), &zero, C, int(N)), "cublasSgemm");
  }
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Seconds per call: the fastest of 5 runs of `reps` queued calls, each run closed by a synchronisation, after one
// warm-up call (kernel loading, cuBLAS's heuristics).
double time_per_call(const std::function<void()>& fn, int reps) {
  fn();
  cuda::synchronize("bench gemm");
  double best = 1e30;
  for (int run = 0; run < 5; ++run) {
    const double t0 = now();
    for (int i = 0; i < reps; ++i) fn();
    cuda::synchronize("bench gemm");
    best = std::min(best, (now() - t0) / reps);
  }
  return best;
}

// max |x - y| / max |y|, from host copies.
double max_rel_diff(const Tensor& x, const Tensor& y) {
  const std::vector<double> a = x.to_vector(), b = y.to_vector();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return diff / scale;
}

}  // namespace

int bench_gemm_cuda(const std::string& vs, int64_t rounds, int64_t reps) {
  ENG_CHECK(vs.empty() || vs == "cublas", "bench gemm --device cuda: --vs expects 'cublas', got '", vs, "'");
  ENG_CHECK(cuda::device_count() > 0, "bench gemm --device cuda: ", cuda::unavailable_reason());
  CuBlas cb;
  if (!vs.empty()) cb = CuBlas::load();
  int version = 0;
  if (cb.handle) cb.get_version(cb.handle, &version);
  std::printf("bench gemm --device cuda: f32 operands, row-major C = A·B, compute capability %d.x%s\n",
              cuda::device_major(), cb.handle ? (", cuBLAS " + std::to_string(version)).c_str() : "");
  std::printf("ours fp32: 128x128x8 shared-memory tiles, FMA; ours tf32: WMMA m16n16k8, fp32 accumulation\n\n");
  std::printf("%-22s %10s %10s", "shape (M x K x N)", "fp32 TF/s", "tf32 TF/s");
  if (cb.handle)
    std::printf(" %12s %12s %9s %9s %14s", "cuBLAS fp32", "cuBLAS tf32", "fp32/cB", "tf32/cB", "tf32 rel diff");
  std::printf("\n");

  struct Shape {
    int64_t M, K, N;
  };
  const std::vector<Shape> shapes = {{1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096},
                                     {8192, 8192, 8192}, {4096, 512, 2048},   {4096, 2048, 512}};
  Rng rng(1);
  for (const Shape& s : shapes) {
    const Tensor A = to_device(randn({s.M, s.K}, rng), Device::CUDA);
    const Tensor B = to_device(randn({s.K, s.N}, rng), Device::CUDA);
    const Tensor C = empty_on({s.M, s.N}, DType::F32, Device::CUDA), D = empty_on({s.M, s.N}, DType::F32, Device::CUDA);
    auto ours = [&](cuda::GemmAlgo algo) {
      return [&, algo] {
        cuda::gemm(false, false, s.M, s.N, s.K, 1.f, A.device_data<float>(), s.K, 0, B.device_data<float>(), s.N,
                       0, 0.f, C.device_data<float>(), s.N, 0, 1, algo);
      };
    };
    auto theirs = [&](bool tf32) {
      return [&, tf32] {
        cb.gemm(tf32, s.M, s.N, s.K, A.device_data<float>(), B.device_data<float>(), D.device_data<float>());
      };
    };
    const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
    double t[4] = {1e30, 1e30, 1e30, 1e30};  // ours fp32, ours tf32, cuBLAS fp32, cuBLAS tf32
    for (int64_t round = 0; round < rounds; ++round) {
      t[0] = std::min(t[0], time_per_call(ours(cuda::GemmAlgo::Tiled), int(reps)));
      t[1] = std::min(t[1], time_per_call(ours(cuda::GemmAlgo::Tf32), int(reps)));
      if (!cb.handle) continue;
      t[2] = std::min(t[2], time_per_call(theirs(false), int(reps)));
      t[3] = std::min(t[3], time_per_call(theirs(true), int(reps)));
    }
    char name[48];
    std::snprintf(name, sizeof name, "%lld x %lld x %lld", (long long)s.M, (long long)s.K, (long long)s.N);
    std::printf("%-22s %10.1f %10.1f", name, flop / t[0] * 1e-12, flop / t[1] * 1e-12);
    if (cb.handle) {
      // C holds our tf32 product (the last one timed), D cuBLAS's tf32 one.
      std::printf(" %12.1f %12.1f %9.2f %9.2f %14.1e", flop / t[2] * 1e-12, flop / t[3] * 1e-12, t[2] / t[0],
                  t[3] / t[1], max_rel_diff(C, D));
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace eng

#else

namespace eng {
int bench_gemm_cuda(const std::string&, int64_t, int64_t) {
  ENG_CHECK(false, "bench gemm --device cuda: eng was built without CUDA; rebuild with make CUDA=1");
  return 1;
}
}  // namespace eng

#endif
