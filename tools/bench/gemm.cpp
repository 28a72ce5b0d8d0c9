// bench gemm: GFLOP/s of the f32 GEMM on square and transformer shapes (--device cuda: tools/bench/gemm_cuda.cpp),
// and of the bf16 GEMM (ops/gemm.h: bf16 operands, f32 accumulation) on the same operands, round by round.
// With --vs openblas it loads libopenblas.so.0 at run time (dlopen: no build dependency; `apt-get install
// libopenblas0`) and times it on the same operands, shape by shape, alternating with ours so that both see the
// same machine load.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/cli.h"
#include "engine/cpu_features.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "engine/threadpool.h"
#include "ops/gemm.h"
#include "tools/bench.h"
#include "tools/bench/gemm_cuda.h"

using namespace eng;

namespace {

struct Problem {
  int64_t M, N, K, batch;
};

// The entry points we call, as libopenblas.so.0 exports them (cblas.h is not needed to build).
struct OpenBlas {
  using Sgemm = void (*)(int order, int trans_a, int trans_b, int M, int N, int K, float alpha, const float* A,
                         int lda, const float* B, int ldb, float beta, float* C, int ldc);
  Sgemm sgemm = nullptr;
  void (*set_num_threads)(int) = nullptr;
  char* (*corename)() = nullptr;
  char* (*config)() = nullptr;

  static OpenBlas load() {
    // This machine's environment forces OpenBLAS onto its Haswell (AVX2) kernels at half speed; OpenBLAS
    // reads these when it is loaded, so they must go first.
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("OPENBLAS_L2_SIZE");
    void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    ENG_CHECK(lib, "bench gemm: cannot load libopenblas.so.0 (", dlerror(), "); apt-get install -y libopenblas0");
    OpenBlas o;
    o.sgemm = reinterpret_cast<Sgemm>(dlsym(lib, "cblas_sgemm"));
    o.set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(lib, "openblas_set_num_threads"));
    o.corename = reinterpret_cast<char* (*)()>(dlsym(lib, "openblas_get_corename"));
    o.config = reinterpret_cast<char* (*)()>(dlsym(lib, "openblas_get_config"));
    ENG_CHECK(o.sgemm && o.set_num_threads && o.corename && o.config, "bench gemm: libopenblas.so.0 lacks a symbol");
    return o;
  }
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Fastest of the calls made in `budget` seconds (at least 3), after one warm-up call.
double best_time(const std::function<void()>& fn, double budget) {
  fn();
  double best = 1e30, start = now();
  for (int i = 0; i < 3 || now() - start < budget; ++i) {
    double t0 = now();
    fn();
    best = std::min(best, now() - t0);
  }
  return best;
}

int bench_gemm(int argc, char** argv) {
  Cli cli("bench gemm", "GFLOP/s of the f32 GEMM, optionally beside OpenBLAS on the same operands.");
  auto& threads = cli.add_int("threads", 2, {1, 1024}, "cpu: threads (ours and OpenBLAS)");
  auto& vs = cli.add_string("vs", "", "'openblas' (cpu) or 'cublas' (cuda) to time that library too, pair by pair");
  auto& device = cli.add_string("device", "cpu", "'cpu', or 'cuda' for the GPU kernels (a CUDA=1 build)");
  auto& reps = cli.add_int("reps", 10, {1, 1 << 20}, "cuda: queued calls per timed run");
  auto& rounds = cli.add_int("rounds", 5, {1, 1 << 20}, "alternating rounds per shape; the best of each side counts");
  auto& budget = cli.add_double("budget", 0.2, RealRange::closed(0, 3600), "cpu: seconds of calls per side per round "
                                "(at least 3 calls)");
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(device == "cpu" || device == "cuda", "bench gemm: --device expects 'cpu' or 'cuda', got '", device, "'");
  if (device == "cuda") return bench_gemm_cuda(vs, rounds, reps);
  ENG_CHECK(vs.empty() || vs == "openblas", "bench gemm: --vs expects 'openblas', got '", vs, "'");
  set_num_threads(int(threads));
  OpenBlas ob;
  if (!vs.empty()) {
    ob = OpenBlas::load();
    ob.set_num_threads(int(threads));
  }
  std::printf("bench gemm: f32 and bf16, row-major C = A·B, %d threads, our kernels: %s (ENG_CPU can lower it)\n",
              num_threads(),
              simd_level_name(simd_level()));
  if (ob.sgemm) std::printf("OpenBLAS: %s, core %s\n", ob.config(), ob.corename());
  std::printf("\n%-28s %12s %12s %9s", "shape (M x K x N)", "ours GFLOP/s", "bf16 GFLOP/s", "bf16/f32");
  if (ob.sgemm) std::printf(" %16s %9s %13s", "OpenBLAS GFLOP/s", "ours/OB", "max rel diff");
  std::printf("\n");

  const std::vector<Problem> problems = {{256, 256, 256, 1},   {512, 512, 512, 1},   {1024, 1024, 1024, 1},
                                         {2048, 2048, 2048, 1}, {4096, 2048, 512, 1}, {4096, 512, 2048, 1},
                                         {512, 512, 64, 64}};
  Rng rng(1);
  for (const Problem& p : problems) {
    const int64_t M = p.M, N = p.N, K = p.K, nb = p.batch;
    std::vector<float> A(size_t(nb * M * K)), B(size_t(nb * K * N)), C(size_t(nb * M * N)), D(C.size());
    for (float& x : A) x = float(2 * rng.uniform() - 1);
    for (float& x : B) x = float(2 * rng.uniform() - 1);
    auto run = [&](GemmPrecision precision) {
      parallel_for(0, nb, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          GemmArgs<float> g;
          g.M = M, g.N = N, g.K = K, g.precision = precision;
          g.A = A.data() + i * M * K, g.a_rs = K, g.a_cs = 1;
          g.B = B.data() + i * K * N, g.b_rs = N, g.b_cs = 1;
          g.C = C.data() + i * M * N, g.c_rs = N;
          gemm(g);
        }
      });
    };
    auto ours = [&] { run(GemmPrecision::F32); };
    auto ours_bf16 = [&] { run(GemmPrecision::Bf16); };
    // OpenBLAS has no batched call: a loop of threaded sgemm calls is what a caller gets from it.
    auto theirs = [&] {
      for (int64_t i = 0; i < nb; ++i)
        ob.sgemm(101, 111, 111, int(M), int(N), int(K), 1.f, A.data() + i * M * K, int(K), B.data() + i * K * N,
                 int(N), 0.f, D.data() + i * M * N, int(N));  // 101 row-major, 111 no transpose
    };
    double t_ours = 1e30, t_bf16 = 1e30, t_theirs = 1e30;
    for (int64_t r = 0; r < rounds; ++r) {
      t_bf16 = std::min(t_bf16, best_time(ours_bf16, budget));
      t_ours = std::min(t_ours, best_time(ours, budget));
      if (!ob.sgemm) continue;
      t_theirs = std::min(t_theirs, best_time(theirs, budget));
      // OpenBLAS's threads spin for a while after a call; let them sleep before timing ours again.
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    const double flop = 2.0 * double(nb * M * N * K);
    char name[64];
    std::snprintf(name, sizeof name, "%lld x %lld x %lld%s", (long long)M, (long long)K, (long long)N,
                  nb > 1 ? (" x " + std::to_string(nb) + " batched").c_str() : "");
    std::printf("%-28s %12.1f %12.1f %9.2f", name, flop / t_ours * 1e-9, flop / t_bf16 * 1e-9, t_ours / t_bf16);
    if (ob.sgemm) {
      double diff = 0, scale = 0;
      for (size_t i = 0; i < C.size(); ++i) {
        diff = std::max(diff, double(std::fabs(C[i] - D[i])));
        scale = std::max(scale, double(std::fabs(D[i])));
      }
      std::printf(" %16.1f %9.2f %13.1e", flop / t_theirs * 1e-9, t_theirs / t_ours, diff / scale);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

ENG_REGISTER_BENCH("gemm", "GFLOP/s of the f32 GEMM per shape, optionally beside OpenBLAS (--vs openblas)", bench_gemm);

}  // namespace
