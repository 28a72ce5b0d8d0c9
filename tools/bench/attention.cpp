// bench attention: forward + backward time and peak memory per sample against sequence length, the
// experiment of Katharopoulos et al. 2020, Figure 1: N = 2^9 .. 2^16, batch ∝ 1/N (a fixed token budget),
// 8 heads of dimension 64, f32. Each variant runs through the registry, exactly as a model would call it.
// --device cuda runs the variants that dispatch to the GPU (softmax's flash attention, causal linear attention;
// docs/cuda.md) on CUDA tensors, with the device allocator's peak as the memory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/cli.h"
#include "engine/cuda.h"
#include "engine/error.h"
#include "engine/parse_number.h"
#include "engine/rng.h"
#include "engine/threadpool.h"
#include "models/attention/attention.h"
#include "ops/reduce.h"
#include "tools/bench.h"
#include "tools/bench/svg_plot.h"

using namespace eng;

namespace {

struct Spec {
  std::string variant;
  bool causal = false;
  int64_t max_log2 = 24;             // measured up to N = 2^max_log2 (a quadratic variant stops early)
  std::vector<std::string> options;  // name=value, for this variant only
  std::string label() const {
    std::string l = variant;
    for (const std::string& o : options) l += " " + o;
    return l + (causal ? " (causal)" : "");
  }
};

// "softmax:causal:max-log2=13,reformer:causal:rounds=4,linear" -> specs: after the name, ':causal', ':max-log2=K'
// (the bench's own: stop this variant at N = 2^K) and ':name=value' options of the variant.
std::vector<Spec> parse_specs(const std::string& list) {
  std::vector<Spec> specs;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    Spec s;
    std::stringstream parts(item);
    std::string part;
    std::getline(parts, s.variant, ':');
    while (std::getline(parts, part, ':')) {
      if (part == "causal") {
        s.causal = true;
      } else if (part.rfind("max-log2=", 0) == 0) {
        s.max_log2 = parse_int(part.substr(9), IntRange{0, 24}, "bench attention: '" + item + "': max-log2");
      } else {
        ENG_CHECK(part.find('=') != std::string::npos, "bench attention: '", item, "': '", part,
                  "' is neither 'causal' nor an option name=value");
        s.options.push_back(part);
      }
    }
    specs.push_back(s);
  }
  ENG_CHECK(!specs.empty(), "bench attention: --variants is empty");
  return specs;
}

struct Result {
  double seconds = 0;  // per sample, forward + backward, median of the repetitions
  double mib = 0;      // peak allocator bytes per sample beyond the inputs, MiB
};

// The allocator of `device`: its live and peak bytes, and the reset of both that a measurement starts from.
struct DeviceMemory {
  Device device;
  AllocatorStats stats() const { return device == Device::CUDA ? cuda::stats() : allocator::stats(); }
  void reset() const {
    if (device == Device::CUDA) {
      cuda::empty_cache();
      cuda::reset_peak();
    } else {
      allocator::empty_cache();
      allocator::reset_peak();
    }
  }
};

Result measure(Attention& attn, bool causal, int64_t batch, int64_t heads, int64_t N, int64_t dim, int reps,
               Device device) {
  auto make = [&](uint64_t seed) {
    Tensor t = empty({batch, heads, N, dim}, DType::F32);
    Rng rng(seed);
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(rng.uniform() * 2 - 1);
    return to_device(t, device).set_requires_grad(true);
  };
  Tensor q = make(1), k = make(2), v = make(3);
  AttentionMask mask;
  mask.causal = causal;
  Result r;
  auto run = [&] {
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    sum(attn.forward(q, k, v, mask)).backward();
    if (device == Device::CUDA) cuda::synchronize("bench attention");  // the kernels run asynchronously
  };
  // Memory first, on fresh blocks, so that the peak counts what a call needs and not what was cached; it is
  // also the warm-up: the timed calls then reuse cached blocks, as training does, instead of paying for the
  // first touch of new pages.
  const DeviceMemory memory{device};
  memory.reset();
  const size_t before = memory.stats().live_bytes;
  run();
  r.mib = double(memory.stats().peak_bytes - before) / double(batch) / (1 << 20);
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  r.seconds = times[times.size() / 2] / double(batch);
  return r;
}

int bench_attention(int argc, char** argv) {
  Cli cli("bench attention",
          "Forward + backward time and peak memory per sample against sequence length (the paper's Figure 1).");
  auto& variants = cli.add_string("variants", "softmax:causal:max-log2=13,linear,causal-linear,performer:causal",
                                  "comma-separated variants; ':causal' gives one a causal mask, ':max-log2=K' stops it "
                                  "at N = 2^K (softmax's N^2 time), ':name=value' an option of its own (e.g. "
                                  "reformer:causal:rounds=4); a variant that adds positions of its own (bp-transformer's "
                                  "span nodes) runs N tokens plus those");
  auto& min_log = cli.add_int("min-log2", 9, {0, 24}, "shortest sequence: 2^min-log2");
  auto& max_log = cli.add_int("max-log2", 16, {0, 24}, "longest sequence: 2^max-log2");
  auto& tokens = cli.add_int("tokens", 1 << 14, {1, 1 << 30}, "token budget: batch = max(1, tokens / N)");
  auto& fixed_batch =
      cli.add_int("batch", 0, {0, 1 << 20}, "fixed batch instead of the token budget (0: use --tokens)");
  auto& heads = cli.add_int("heads", 8, {1, 1024}, "heads");
  auto& dim = cli.add_int("head-dim", 64, {1, 1 << 16}, "head dimension (queries, keys and values)");
  auto& reps = cli.add_int("reps", 3, {1, 1000000}, "repetitions per point (the median is reported)");
  auto& threads = cli.add_int("threads", 2, {1, 1024}, "threads");
  auto& device_name = cli.add_string("device", "cpu", "'cpu', or 'cuda' (a CUDA=1 build; variants whose forward "
                                     "dispatches to it)");
  auto& svg = cli.add_string("svg", "", "also write a log-log plot of time per sample to this SVG file");
  auto& opts = cli.add_list("attn-opt", "an option name=value given to every listed variant (e.g. window=2048)");
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(min_log <= max_log, "bench attention: --min-log2 ", min_log, " is above --max-log2 ", max_log,
            ": no sequence length to measure");
  set_num_threads(int(threads));
  ENG_CHECK(device_name == "cpu" || device_name == "cuda", "bench attention: --device expects 'cpu' or 'cuda', got '",
            device_name, "'");
  const Device device = device_name == "cuda" ? Device::CUDA : Device::CPU;
  ENG_CHECK(device == Device::CPU || cuda::device_count() > 0, "bench attention --device cuda: ",
            cuda::unavailable_reason());
  const std::vector<Spec> specs = parse_specs(variants);
  std::vector<std::unique_ptr<Attention>> mechs;
  for (const Spec& s : specs) {
    AttentionConfig c;
    c.heads = heads;
    c.head_dim = dim;
    c.causal = s.causal;
    for (const std::string& kv : opts) c.options.set_pair(kv, "bench attention");
    for (const std::string& kv : s.options) c.options.set_pair(kv, "bench attention");
    // Length-sized parameters (linformer) fit the longest N, counted in the variant's own positions.
    c.max_len = make_attention(s.variant, c)->positions(int64_t(1) << max_log);
    mechs.push_back(make_attention(s.variant, c));
    ENG_CHECK(device == Device::CPU || mechs.back()->accepts().cuda, "bench attention --device cuda: attention '",
              s.variant, "' has no CUDA form (docs/cuda.md)");
  }
  std::printf("bench attention: %lld heads, head dim %lld, f32, %s, %s; time (ms) and peak memory (MiB) per "
              "sample, forward + backward, median of %lld\n",
              (long long)heads, (long long)dim,
              device == Device::CUDA ? "cuda" : (std::to_string(num_threads()) + " threads").c_str(),
              fixed_batch > 0 ? ("batch " + std::to_string(fixed_batch)).c_str()
                              : ("batch = max(1, " + std::to_string(tokens) + " / N)").c_str(),
              (long long)reps);
  std::printf("%8s %6s", "N", "batch");
  for (const Spec& s : specs) std::printf(" | %26s", s.label().c_str());
  std::printf("\n");
  std::vector<bench::Series> series(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) series[i].name = specs[i].label();
  for (int64_t lg = min_log; lg <= max_log; ++lg) {
    const int64_t N = int64_t(1) << lg;
    const int64_t batch = fixed_batch > 0 ? fixed_batch : std::max<int64_t>(1, tokens / N);
    std::printf("%8lld %6lld", (long long)N, (long long)batch);
    for (size_t i = 0; i < specs.size(); ++i) {
      series[i].x.push_back(double(N));
      if (lg > specs[i].max_log2) {
        series[i].y.push_back(0);
        std::printf(" | %26s", "(skipped: > max-log2)");
        continue;
      }
      const Result r =
          measure(*mechs[i], specs[i].causal, batch, heads, mechs[i]->positions(N), dim, int(reps), device);
      series[i].y.push_back(r.seconds);
      std::printf(" | %11.2f ms %9.1f MiB", r.seconds * 1e3, r.mib);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  // The growth the paper's claim is about: time(N_max) / time(N_max / 16), 16x the length.
  if (max_log - min_log >= 4)
    for (size_t i = 0; i < specs.size(); ++i) {
      const double a = series[i].y[size_t(max_log - min_log - 4)], b = series[i].y.back();
      if (a > 0 && b > 0)
        std::printf("%s: time(2^%lld) / time(2^%lld) = %.1f (linear: 16, quadratic: 256)\n",
                    specs[i].label().c_str(), (long long)max_log, (long long)(max_log - 4), b / a);
    }
  if (!svg.empty()) {
    bench::write_loglog_svg(svg, "attention forward + backward per sample", "sequence length N", "seconds", series);
    std::printf("wrote %s\n", svg.c_str());
  }
  return 0;
}

}  // namespace

ENG_REGISTER_BENCH("attention", "forward + backward time and memory against sequence length (paper Figure 1)",
                   bench_attention);
