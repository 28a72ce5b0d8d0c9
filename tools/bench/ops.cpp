// bench ops: GB/s of the memory-bound ops (elementwise, softmax, layer-norm, cross-entropy, Adam) beside
// memcpy, measured in the same run. Each op is called through its public Tensor API, f32, on [rows, cols]
// inputs, so the figure is what training gets, allocation by the caching allocator included. GB/s counts
// the minimal traffic of one call: each input read once and each output written once.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "engine/threadpool.h"
#include "engine/vec_kernels.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/softmax.h"
#include "ops/unary.h"
#include "tools/bench.h"

using namespace eng;

namespace {

// One timed call and the bytes it must move at least.
struct Case {
  double bytes;
  std::function<void()> call;
};

struct Kernel {
  const char* name;
  const char* counted;  // what the byte count is made of
  std::function<Case(int64_t rows, int64_t cols, Rng& rng)> setup;
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Fastest of `reps` calls after one warm-up call. The warm-up also leaves the outputs' blocks in the
// allocator's pool, so the timed calls do not pay the first touch of fresh pages.
double best_time(const std::function<void()>& fn, int64_t reps) {
  fn();
  double best = 1e30;
  for (int64_t i = 0; i < reps; ++i) {
    double t0 = now();
    fn();
    best = std::min(best, now() - t0);
  }
  return best;
}

// The op's backward closure, as run_backward calls it (grad mode off). Calling it directly leaves out
// the copy of the gradient into a leaf's .grad, which an activation inside a network never pays.
std::vector<Tensor> call_backward(const Tensor& out, const Tensor& grad) {
  NoGradGuard no_grad;
  return out.grad_fn()->backward(grad);
}

// A forward op of one [rows, cols] input and one output of the same shape.
Kernel unary_forward(const char* name, Tensor (*op)(const Tensor&)) {
  return {name, "read x; write y", [op](int64_t rows, int64_t cols, Rng& rng) {
            Tensor x = randn({rows, cols}, rng);
            return Case{8.0 * double(rows * cols), [op, x] { op(x); }};
          }};
}

// The backward of such an op: x requires grad, y = op(x) is built once, and each call maps g to dx.
Kernel unary_backward(const char* name, const char* counted, Tensor (*op)(const Tensor&)) {
  return {name, counted, [op](int64_t rows, int64_t cols, Rng& rng) {
            Tensor x = randn({rows, cols}, rng).set_requires_grad();
            Tensor y = op(x), g = randn({rows, cols}, rng);
            return Case{12.0 * double(rows * cols), [y, g] { call_backward(y, g); }};
          }};
}

Tensor gelu_erf(const Tensor& x) { return gelu(x, GeluForm::Erf); }
Tensor softmax_last(const Tensor& x) { return softmax(x, -1); }
Tensor log_softmax_last(const Tensor& x) { return log_softmax(x, -1); }

std::vector<Kernel> kernels() {
  std::vector<Kernel> k;
  k.push_back({"add", "read a, b; write y", [](int64_t rows, int64_t cols, Rng& rng) {
                 Tensor a = randn({rows, cols}, rng), b = randn({rows, cols}, rng);
                 return Case{12.0 * double(rows * cols), [a, b] { add(a, b); }};
               }});
  k.push_back(unary_forward("exp", [](const Tensor& x) { return eng::exp(x); }));
  k.push_back(unary_forward("gelu", gelu_erf));
  k.push_back(unary_backward("gelu_bwd", "read g, x; write dx", gelu_erf));
  k.push_back(unary_forward("softmax", softmax_last));
  k.push_back(unary_backward("softmax_bwd", "read y, g; write dx", softmax_last));
  k.push_back(unary_forward("log_softmax", log_softmax_last));
  k.push_back({"layer_norm", "read x, w, b; write y", [](int64_t rows, int64_t cols, Rng& rng) {
                 Tensor x = randn({rows, cols}, rng), w = randn({cols}, rng), b = randn({cols}, rng);
                 return Case{4.0 * double(2 * rows * cols + 2 * cols), [x, w, b] { layer_norm(x, w, b); }};
               }});
  k.push_back({"layer_norm_bwd", "read x, g, w, row stats; write dx, dw, db", [](int64_t rows, int64_t cols, Rng& rng) {
                 Tensor x = randn({rows, cols}, rng).set_requires_grad();
                 Tensor w = randn({cols}, rng).set_requires_grad(), b = randn({cols}, rng).set_requires_grad();
                 Tensor y = layer_norm(x, w, b), g = randn({rows, cols}, rng);
                 return Case{4.0 * double(3 * rows * cols + 2 * rows + 3 * cols), [y, g] { call_backward(y, g); }};
               }});
  k.push_back({"cross_entropy", "fwd+bwd: read logits, targets; write dlogits", [](int64_t rows, int64_t cols,
                                                                                     Rng& rng) {
                 Tensor logits = randn({rows, cols}, rng).set_requires_grad();
                 Tensor targets = empty({rows}, DType::I64);
                 for (int64_t i = 0; i < rows; ++i) targets.data<int64_t>()[i] = int64_t(rng.below(uint64_t(cols)));
                 Tensor one = scalar_tensor(1.0);
                 return Case{4.0 * double(2 * rows * cols) + 8.0 * double(rows), [logits, targets, one] {
                               call_backward(cross_entropy(logits, targets), one);
                             }};
               }});
  k.push_back({"adam", "read p, g, m, v; write p, m, v", [](int64_t rows, int64_t cols, Rng& rng) {
                 Tensor p = randn({rows, cols}, rng);
                 p.set_grad(randn({rows, cols}, rng));
                 // The optimizer is shared by the calls: each is one more step of the same run.
                 auto opt = std::make_shared<Adam>(NamedTensors{{"p", p}}, 1e-3);
                 return Case{28.0 * double(rows * cols), [opt] { opt->step(); }};
               }});
  return k;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

void print_row(const char* name, double bytes, double seconds, double base_gbs, const char* counted) {
  const double gbs = bytes / seconds * 1e-9;
  std::printf("%-15s %10.1f %9.2f %8.1f %7.2f  %s\n", name, bytes / double(1 << 20), seconds * 1e3, gbs,
              gbs / base_gbs, counted);
  std::fflush(stdout);
}

int bench_ops(int argc, char** argv) {
  const std::vector<Kernel> all = kernels();
  std::string names;
  for (const Kernel& k : all) names += (names.empty() ? "" : ",") + std::string(k.name);
  Cli cli("bench ops", "GB/s of the memory-bound ops (f32, [rows, cols]) beside memcpy in the same run.");
  auto& rows = cli.add_int("rows", 16384, {1, 1 << 24}, "rows of every operand");
  auto& cols = cli.add_int("cols", 1024, {1, 1 << 24}, "columns (the softmax / norm / cross-entropy axis)");
  auto& threads = cli.add_int("threads", 2, {1, 1024}, "threads");
  auto& reps = cli.add_int("reps", 5, {1, 1000000}, "timed calls per kernel, after one warm-up; the fastest counts");
  auto& which = cli.add_string("kernels", "all", "'all' or a comma-separated subset of: " + names);
  if (!cli.parse(argc, argv, 2)) return 0;
  std::vector<const Kernel*> chosen;
  for (const std::string& name : split_commas(which == "all" ? names : which)) {
    auto it = std::find_if(all.begin(), all.end(), [&](const Kernel& k) { return name == k.name; });
    ENG_CHECK(it != all.end(), "bench ops: unknown kernel '", name, "' in --kernels (known: ", names, ")");
    chosen.push_back(&*it);
  }
  ENG_CHECK(!chosen.empty(), "bench ops: --kernels names no kernel (known: ", names, ")");
  set_num_threads(int(threads));
  const int64_t n = rows * cols;
  std::printf("bench ops: f32 [%lld, %lld], %.1f MiB per tensor, %d threads, vec kernels: %s (ENG_CPU can lower "
              "it), fastest of %lld calls after one warm-up\n",
              (long long)rows, (long long)cols, 4.0 * double(n) / double(1 << 20), num_threads(),
              vec_kernels().name, (long long)reps);
  std::printf("memcpy: one tensor-sized copy split over the threads as the ops split their loops; GB/s counts "
              "read + write\n\n");
  std::printf("%-15s %10s %9s %8s %7s  %s\n", "kernel", "bytes MiB", "ms", "GB/s", "/memcpy", "bytes counted");

  // Both buffers are written before timing: the first touch of a fresh page costs far more than the copy.
  std::vector<float> src(size_t(n), 1.f), dst(size_t(n), 0.f);
  const double copy_s = best_time(
      [&] {
        parallel_for(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {
          std::memcpy(dst.data() + lo, src.data() + lo, size_t(hi - lo) * sizeof(float));
        });
      },
      reps);
  const double copy_bytes = 8.0 * double(n);
  const double copy_gbs = copy_bytes / copy_s * 1e-9;
  print_row("memcpy", copy_bytes, copy_s, copy_gbs, "read src; write dst");
  // A second baseline: the same copy as a plain loop, whose ordinary stores read each line before writing
  // it, as the ops' stores do (glibc's memcpy streams large copies past the cache instead).
  const double loop_s = best_time(
      [&] {
        parallel_for(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {
          float* d = dst.data();
          const float* s = src.data();
          for (int64_t i = lo; i < hi; ++i) d[i] = s[i];
        });
      },
      reps);
  print_row("copy loop", copy_bytes, loop_s, copy_gbs, "read src; write dst (a loop, not memcpy)");

  Rng rng(1);
  for (const Kernel* k : chosen) {
    Case c = k->setup(rows, cols, rng);
    print_row(k->name, c.bytes, best_time(c.call, reps), copy_gbs, k->counted);
  }
  return 0;
}

ENG_REGISTER_BENCH("ops", "GB/s of the memory-bound ops (softmax, layer-norm, gelu, Adam, ...) beside memcpy",
                   bench_ops);

}  // namespace
