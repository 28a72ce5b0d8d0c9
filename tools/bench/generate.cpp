// bench generate: autoregressive generation speed of a pixel model (Katharopoulos et al. 2020, Tables 1, 2,
// 4 and 5): 8 layers, d_model 256, 8 heads, FFN 1024, 256 pixel values, random weights, greedy decoding.
// Five generators, timed in one run (--modes):
//   naive     softmax, the whole prefix recomputed for every new pixel (O(N^3) attention work per image)
//   stateful  softmax with a key/value cache (stateful-softmax: O(N^2) per image)
//   linear    causal linear attention in its RNN form (O(N) per image, constant work per pixel)
//   lsh-1/4   causal reformer with 1 or 4 hash rounds, the prefix recomputed per pixel, as for the paper's LSH
//             rows (O(N^2 chunk) per image); the `reformer` variant mode generates with its step() instead
//   VARIANT   any registered variant with a recurrent form, generated with its step(); options follow the name as
//             ':name=value' ("band:window=64:block=64")
// The recurrent rows report the state's bytes per layer at the end of the image: the host allocator's live bytes
// with the state alive, less those before it was made (CPU only; the softmax cache's capacity doubles).
// Latency: one image (batch 1); throughput: many images in flight (--batch). The naive generator at full
// length takes minutes, so by default its time (and lsh's) per image is integrated from timed prefix forwards at
// --naive-samples evenly spaced lengths (trapezoid rule; stated as an estimate); --naive-full runs it all.
// --device cuda runs the naive, stateful and linear generators with the models on the GPU (docs/cuda.md); the
// token ids stay on the host, and each pixel's logits come back to it for the greedy choice, as a sampler would.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/cli.h"
#include "engine/cuda.h"
#include "engine/error.h"
#include "engine/parse_number.h"
#include "engine/threadpool.h"
#include "models/transformer.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tools/bench.h"

using namespace eng;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

TransformerConfig pixel_model(const std::string& attention, int64_t layers, int64_t d_model, int64_t heads,
                              int64_t tokens) {
  TransformerConfig c;
  c.vocab = 256;
  c.d_model = d_model;
  c.heads = heads;
  c.d_ff = 4 * d_model;
  c.decoder_layers = layers;
  c.max_len = tokens;
  c.attention = attention;
  c.positional = PositionalKind::Learned;
  return c;
}

// [B] greedy choice from logits [B, vocab], on the host (a copy back when the logits are on the GPU).
Tensor greedy(const Tensor& logits) { return argmax(to_device(logits.contiguous(), Device::CPU), 1); }

struct Timing {
  double seconds = 0;            // per batch of images
  double first_ms = 0, last_ms = 0;  // per token, averaged over the first and the last tenth of the image
  double state_bytes = -1;           // per layer at the end, recurrent generators on the CPU; < 0: not measured
  bool estimated = false;
};

// The recurrent generators: one model.step per pixel.
Timing generate_recurrent(const LanguageModel& model, int64_t batch, int64_t tokens) {
  NoGradGuard no_grad;
  const size_t live_before = allocator::stats().live_bytes;
  auto state = model.new_state();
  Tensor cur = zeros({batch}, DType::I64);
  std::vector<double> per_token;
  auto t0 = Clock::now();
  for (int64_t t = 0; t < tokens; ++t) {
    auto ts = Clock::now();
    cur = greedy(model.step(cur, state));
    per_token.push_back(since(ts));
  }
  Timing r;
  r.seconds = since(t0);
  if (cur.device() == Device::CPU && model.config().decoder_layers > 0) {
    const size_t held = allocator::stats().live_bytes - live_before - size_t(cur.numel()) * sizeof(int64_t);
    r.state_bytes = double(held) / double(model.config().decoder_layers);
  }
  const size_t tenth = std::max<size_t>(1, per_token.size() / 10);
  for (size_t i = 0; i < tenth; ++i) {
    r.first_ms += per_token[i] * 1e3 / double(tenth);
    r.last_ms += per_token[per_token.size() - 1 - i] * 1e3 / double(tenth);
  }
  return r;
}

// One pixel of the naive generator at prefix length t: a full forward over the prefix, the last logits.
double naive_token(const LanguageModel& model, Tensor& prefix, int64_t t) {
  auto ts = Clock::now();
  Tensor logits = model.forward(narrow(prefix, 1, 0, t));
  Tensor next = greedy(reshape(narrow(logits, 1, t - 1, 1).contiguous(), {prefix.size(0), -1}));
  if (t < prefix.size(1)) narrow(prefix, 1, t, 1).copy_from(reshape(next, {prefix.size(0), 1}));
  return since(ts);
}

Timing generate_naive(const LanguageModel& model, int64_t batch, int64_t tokens, bool full, int64_t samples) {
  NoGradGuard no_grad;
  Tensor prefix = zeros({batch, tokens}, DType::I64);
  Timing r;
  if (full) {
    for (int64_t t = 1; t <= tokens; ++t) r.seconds += naive_token(model, prefix, t);
    return r;
  }
  // Time at evenly spaced prefix lengths, integrate over t = 1 .. tokens.
  std::vector<int64_t> ts;
  for (int64_t s = 0; s < samples; ++s) ts.push_back(1 + (tokens - 1) * s / std::max<int64_t>(1, samples - 1));
  std::vector<double> secs;
  for (int64_t t : ts) secs.push_back(naive_token(model, prefix, t));
  for (size_t i = 0; i + 1 < ts.size(); ++i) r.seconds += 0.5 * (secs[i] + secs[i + 1]) * double(ts[i + 1] - ts[i]);
  r.seconds += secs.front();
  r.estimated = true;
  return r;
}

// A --modes entry that names a variant: "band:window=64:block=64" -> a pixel model of that variant, which must have
// a recurrent form.
std::unique_ptr<LanguageModel> variant_model(const std::string& mode, int64_t layers, int64_t d_model, int64_t heads,
                                             int64_t tokens) {
  std::stringstream parts(mode);
  std::string variant, pair;
  std::getline(parts, variant, ':');
  TransformerConfig c = pixel_model(variant, layers, d_model, heads, tokens);
  while (std::getline(parts, pair, ':')) c.attention_options.set_pair(pair, "bench generate: --modes '" + mode + "'");
  auto m = std::make_unique<LanguageModel>(c);
  m->eval();
  const auto state = m->new_state();
  ENG_CHECK(!state.layers.empty() && state.layers[0], "bench generate: --modes '", mode, "': attention '", variant,
            "' has no recurrent form (step) with these options");
  return m;
}

std::vector<int64_t> parse_sizes(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    out.push_back(parse_int(item, {1, 1 << 20}, "bench generate: --tokens"));
  ENG_CHECK(!out.empty(), "bench generate: --tokens is empty");
  return out;
}

int bench_generate(int argc, char** argv) {
  Cli cli("bench generate", "Generation speed: naive softmax, stateful softmax and the linear RNN form.");
  auto& tokens_list = cli.add_string("tokens", "784,3072", "comma-separated image sizes in pixels, each in "
                                     "1..1048576 (784 = 28x28, 3072 = 32x32x3)");
  auto& layers = cli.add_int("layers", 8, {1, 1024}, "layers");
  auto& d_model = cli.add_int("d-model", 256, {1, 1 << 16}, "model width (FFN 4 x d_model)");
  auto& heads = cli.add_int("heads", 8, {1, 1024}, "heads");
  auto& batch = cli.add_int("batch", 32, {1, 1 << 16}, "images in flight for the throughput rows");
  auto& modes = cli.add_string("modes", "naive,stateful,linear", "generators to time: naive, stateful, linear, lsh-1, "
                               "lsh-4, or a variant with a recurrent form and its options (band:window=64)");
  auto& naive_full = cli.add_bool("naive-full", false, "run the naive generator in full instead of estimating it");
  // Two at least: the estimate integrates between timed lengths.
  auto& naive_samples = cli.add_int("naive-samples", 8, {2, 1 << 16}, "prefix lengths timed for the naive estimate");
  auto& threads = cli.add_int("threads", 2, {1, 1024}, "threads");
  auto& device_name = cli.add_string("device", "cpu", "'cpu', or 'cuda' for the models on the GPU (a CUDA=1 build; "
                                     "naive, stateful and linear)");
  if (!cli.parse(argc, argv, 2)) return 0;
  set_num_threads(int(threads));
  ENG_CHECK(device_name == "cpu" || device_name == "cuda", "bench generate: --device expects 'cpu' or 'cuda', got '",
            device_name, "'");
  const Device device = device_name == "cuda" ? Device::CUDA : Device::CPU;
  ENG_CHECK(device == Device::CPU || cuda::device_count() > 0, "bench generate --device cuda: ",
            cuda::unavailable_reason());
  const std::vector<int64_t> sizes = parse_sizes(tokens_list);
  const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
  ENG_CHECK(!modes.empty(), "bench generate: --modes is empty: name at least one generator");
  std::vector<std::pair<std::string, std::unique_ptr<LanguageModel>>> variant_models;
  std::stringstream listed(modes);
  std::string mode;
  while (std::getline(listed, mode, ','))
    if (mode != "naive" && mode != "stateful" && mode != "linear" && mode != "lsh-1" && mode != "lsh-4")
      variant_models.emplace_back(mode, variant_model(mode, layers, d_model, heads, longest));
  auto has = [&](const std::string& m) { return ("," + modes + ",").find("," + m + ",") != std::string::npos; };
  ENG_CHECK(device == Device::CPU || (!has("lsh-1") && !has("lsh-4")),
            "bench generate --device cuda: reformer does not run on cuda yet; drop lsh-1 and lsh-4 from --modes");
  LanguageModel softmax_model(pixel_model("stateful-softmax", layers, d_model, heads, longest));
  LanguageModel linear_model(pixel_model("causal-linear", layers, d_model, heads, longest));
  softmax_model.eval();
  linear_model.eval();
  if (device == Device::CUDA) {
    softmax_model.to(device);
    linear_model.to(device);
    for (auto& vm : variant_models) vm.second->to(device);
  }
  // Like the paper's LSH-1 and LSH-4 rows, lsh-1/4 recompute the prefix per pixel (reformer's step() is the
  // `reformer` variant mode).
  auto reformer = [&](int rounds) {
    TransformerConfig c = pixel_model("reformer", layers, d_model, heads, longest);
    c.attention_options.set("rounds", std::to_string(rounds));
    auto m = std::make_unique<LanguageModel>(c);
    m->eval();
    return m;
  };
  std::unique_ptr<LanguageModel> lsh1 = has("lsh-1") ? reformer(1) : nullptr, lsh4 = has("lsh-4") ? reformer(4) : nullptr;
  std::printf("bench generate: %lld layers, d_model %lld, %lld heads, FFN %lld, 256 values, %lld parameters, greedy, "
              "%s\n",
              (long long)layers, (long long)d_model, (long long)heads, (long long)(4 * d_model),
              (long long)linear_model.num_parameters(),
              device == Device::CUDA ? "cuda" : (std::to_string(num_threads()) + " threads").c_str());
  int label_width = 10;
  for (const auto& vm : variant_models) label_width = std::max(label_width, int(vm.first.size()));
  for (int64_t tokens : sizes) {
    for (int64_t b : batch == 1 ? std::vector<int64_t>{1} : std::vector<int64_t>{1, batch}) {  // batch 1 once
      std::printf("\n%lld pixels, batch %lld (%s)\n", (long long)tokens, (long long)b,
                  b == 1 ? "latency" : "throughput");
      std::printf("  %-*s %12s %12s %12s %14s %21s %16s\n", label_width, "generator", "s/batch", "images/s",
                  "tokens/s", "vs naive", "ms/token first/last", "state KiB/layer");
      double naive_s = 0;
      std::vector<std::pair<std::string, Timing>> rows;
      if (has("naive")) rows.push_back({"naive", generate_naive(softmax_model, b, tokens, naive_full, naive_samples)});
      if (has("stateful")) rows.push_back({"stateful", generate_recurrent(softmax_model, b, tokens)});
      if (has("linear")) rows.push_back({"linear", generate_recurrent(linear_model, b, tokens)});
      if (lsh1) rows.push_back({"lsh-1", generate_naive(*lsh1, b, tokens, naive_full, naive_samples)});
      if (lsh4) rows.push_back({"lsh-4", generate_naive(*lsh4, b, tokens, naive_full, naive_samples)});
      for (const auto& vm : variant_models) rows.push_back({vm.first, generate_recurrent(*vm.second, b, tokens)});
      for (const auto& [name, t] : rows)
        if (name == "naive") naive_s = t.seconds;
      for (const auto& [name, t] : rows) {
        std::printf("  %-*s %11.3f%s %12.2f %12.0f", label_width, name.c_str(), t.seconds, t.estimated ? "*" : " ",
                    double(b) / t.seconds, double(b * tokens) / t.seconds);
        if (naive_s > 0) std::printf(" %13.1fx", naive_s / t.seconds); else std::printf(" %14s", "-");
        if (t.first_ms > 0) std::printf("   %7.3f / %7.3f", t.first_ms, t.last_ms); else std::printf(" %21s", "");
        if (t.state_bytes >= 0) std::printf(" %16.1f", t.state_bytes / 1024.0);
        std::printf("\n");
      }
      for (const auto& [name, t] : rows)
        if (name == "stateful")
          for (const auto& [name2, t2] : rows)
            if (name2 == "linear") std::printf("  linear RNN / stateful softmax: %.2fx\n", t.seconds / t2.seconds);
      // The step's matrix products per token: q, k, v, output and the FFN's two in every layer, and the head.
      const double step_flops = 2.0 * double(b) * double(layers * (4 * d_model * d_model + 8 * d_model * d_model) +
                                                          d_model * 256);
      for (const auto& [name, t] : rows)
        if (name == "linear")
          std::printf("  linear RNN step: %.1f GF/s (its matrix products, %.1f MFLOP per token, over the whole step)\n",
                      step_flops * double(tokens) / t.seconds * 1e-9, step_flops * 1e-6);
      if (std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.second.estimated; }))
        std::printf("  * naive and lsh: integrated from %lld timed prefix forwards (--naive-full runs them in full)\n",
                    (long long)naive_samples);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

ENG_REGISTER_BENCH("generate", "generation speed: naive softmax, stateful softmax, linear RNN form, reformer (paper "
                   "Tables 1-5)",
                   bench_generate);
