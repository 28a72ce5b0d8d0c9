// bench quant: generation speed from f32, q8_0 and q4_0 weights (ops/quant.h), the same random model in each form,
// timed in one run on the allocation-free KV-cache Generator (models/generator.h: greedy, batch 1), as embed runs:
//   medium  6 layers, d_model 288, 6 heads, FFN 1152, context 256, vocab 256: the shape of llama2.c's
//           TinyStories-15M (24 MB of f32 weights)
//   big     a model whose weights are --big-factor times the last-level cache, so that every token streams them
//           from memory: the weight bytes per token over the time per token is the bandwidth reached, printed
//           beside memcpy's on a buffer of the f32 weights' size.
// Each time is the best of --repeat runs, the forms taking turns, by wall clock and by the process's CPU time (the
// machine may be shared: the ratios, to the f32 model of the same run, are by CPU time). The last-level cache is
// what sysconf reports unless --llc-mb says otherwise: on a VM it may be the whole socket's (docs/kernels.md). --copy CHECKPOINT, or --text CHECKPOINT --data FILE,
// instead measure what quantization costs a trained model: held-out loss and accuracy from f32 and each format.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "datasets/copy_task.h"
#include "datasets/text.h"
#include "engine/parse_number.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/generator.h"
#include "models/quantized.h"
#include "models/transformer.h"
#include "ops/loss.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tools/bench.h"

using namespace eng;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

TransformerConfig model_config(int64_t layers, int64_t d_model, int64_t heads, int64_t context) {
  TransformerConfig c;
  c.vocab = 256;
  c.d_model = d_model;
  c.heads = heads;
  c.d_ff = 4 * d_model;
  c.decoder_layers = layers;
  c.max_len = context;
  c.attention = "stateful-softmax";
  c.positional = PositionalKind::Learned;
  return c;
}

// CPU seconds of this process: on a shared machine a run's wall time includes the time it waited for a core, its CPU
// time does not (with one thread, the pool's workers sleep and the two are the same work).
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct Timing {
  double wall = 1e30, cpu = 1e30;  // seconds per token, each the best of the runs
};

// One greedy generation of `tokens` tokens from token 0 on the allocation-free Generator (models/generator.h), as
// embed generates; keeps the faster of it and `best`.
void time_generation(Generator& gen, int64_t tokens, Timing& best) {
  gen.reset();
  int64_t id = 0;
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  for (int64_t t = 0; t < tokens; ++t) {
    const float* logits = gen.step(id);
    id = int64_t(std::max_element(logits, logits + gen.outputs()) - logits);
  }
  best.cpu = std::min(best.cpu, (cpu_seconds() - c0) / double(tokens));
  best.wall = std::min(best.wall, since(t0) / double(tokens));
}

int64_t weight_bytes(const Module& m) {
  int64_t n = 0;
  for (const auto& [name, p] : m.named_parameters()) n += p.numel() * int64_t(dtype_size(p.dtype()));
  return n;
}

// Last-level cache in bytes: the largest cache sysconf reports, or 0 when it reports none.
int64_t last_level_cache() {
  int64_t best = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  for (int name : {_SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL4_CACHE_SIZE})
    best = std::max<int64_t>(best, sysconf(name));
#endif
  return best;
}

// memcpy's bandwidth on `bytes`: bytes copied per CPU second, the best of 5 copies after a first that faults the
// pages.
double memcpy_gbs(int64_t bytes) {
  std::vector<char> a(size_t(bytes), 1), b(size_t(bytes), 2);
  double best = 1e30;
  for (int r = 0; r < 6; ++r) {
    const double c0 = cpu_seconds();
    std::memcpy(b.data(), a.data(), size_t(bytes));
    if (r > 0) best = std::min(best, cpu_seconds() - c0);
    a[size_t(r)] = b[size_t(bytes) - 1 - size_t(r)];  // the copy is used
  }
  return double(bytes) / best / 1e9;
}

struct Row {
  std::string name;
  Timing t;
  int64_t bytes = 0;
};

// The model in f32 and each format of `formats`, timed by turns (f32, q8_0, q4_0, f32, ...: a change of the machine's
// load during the run falls on every form alike); prints tokens/s by wall and by CPU time, the ratios to f32 (by CPU
// time), and the weights' GB/s (bytes per token over CPU seconds per token).
void time_formats(const TransformerConfig& c, const std::vector<QuantFormat>& formats, int64_t tokens, int64_t repeat) {
  std::vector<std::unique_ptr<LanguageModel>> models;
  std::vector<Row> rows;
  for (size_t i = 0; i <= formats.size(); ++i) {
    models.push_back(std::make_unique<LanguageModel>(c));  // the same seed: the same weights
    models.back()->eval();
    if (i > 0) quantize_model(*models.back(), formats[i - 1]);
    allocator::empty_cache();  // the f32 weights a quantized model replaced: all three models are held at once
    rows.push_back({i == 0 ? "f32" : quant_format_name(formats[i - 1]), Timing(), weight_bytes(*models.back())});
  }
  std::vector<std::unique_ptr<Generator>> gens;
  for (const auto& m : models) gens.push_back(std::make_unique<Generator>(*m));
  for (int64_t r = 0; r < repeat; ++r)
    for (size_t i = 0; i < gens.size(); ++i) time_generation(*gens[i], tokens, rows[i].t);
  std::printf("  %-6s %11s %13s %12s %13s %10s %9s\n", "format", "weights MB", "tokens/s wall", "tokens/s cpu",
              "us/token cpu", "vs f32", "GB/s");
  for (const Row& r : rows)
    std::printf("  %-6s %11.1f %13.1f %12.1f %13.1f %9.2fx %9.2f\n", r.name.c_str(), double(r.bytes) / 1e6,
                1 / r.t.wall, 1 / r.t.cpu, r.t.cpu * 1e6, rows[0].t.cpu / r.t.cpu, double(r.bytes) / r.t.cpu / 1e9);
  std::fflush(stdout);
}

// What quality is measured on: a checkpoint written by train and the held-out batches to score it on.
struct Quality {
  std::string path, unit;  // unit: "nats" per target, or "bits" per byte (text)
  TransformerConfig model;
  std::vector<LMBatch> batches;
};

// The copy task's held-out batches: a generator seeded apart from training's, the copied half scored
// (datasets/copy_task.h).
Quality copy_quality(const std::string& path, int64_t batches, int64_t seed) {
  const RunConfig run = read_run_config(load_safetensors(path).metadata);
  ENG_CHECK(run.task.count("name") && run.task.at("name") == "copy", "bench quant: --copy ", path,
            " is not a copy-task checkpoint written by train");
  Quality q{path, "nats", TransformerConfig::from_map(run.model), {}};
  const CopyTask task(q.model.max_len, parse_int(run.task.at("symbols"), {1, 1 << 20}, "task.symbols"),
                      run.task.at("fixed_length") == "true");
  Rng rng(static_cast<uint64_t>(seed));
  for (int64_t b = 0; b < batches; ++b) q.batches.push_back(task.sample(rng, 32 * b, 32));
  return q;
}

// A byte-level language model's test split (datasets/text.h: the last 5 % of --data, never trained on), in
// consecutive windows of its context, at most 32 windows a batch.
Quality text_quality(const std::string& path, const std::string& data) {
  const RunConfig run = read_run_config(load_safetensors(path).metadata);
  ENG_CHECK(run.task.count("name") && run.task.at("name") == "text" && !run.task.count("tokenizer"),
            "bench quant: --text ", path, " is not a byte-level text checkpoint written by train");
  Quality q{path, "bits", TransformerConfig::from_map(run.model), {}};
  const TextCorpus corpus(data);
  const int64_t len = q.model.max_len, windows = corpus.num_windows(TextSplit::Test, len);
  ENG_CHECK(windows > 0, "bench quant: the test split of ", data, " holds no window of ", len + 1, " bytes");
  for (int64_t w = 0; w < windows; w += 32)
    q.batches.push_back(corpus.windows(TextSplit::Test, w, std::min<int64_t>(32, windows - w), len));
  return q;
}

// Held-out loss (mean per scored target: nats, or bits for text) and accuracy from f32 and each format, the same
// batches for each, teacher-forced. q4_0 is measured twice: as quantize writes it (the token tables and the head in
// q8_0, models/quantized.h) and with every weight in q4_0 (quantize --pure).
void print_quality(const Quality& q, const std::vector<QuantFormat>& formats) {
  struct Variant {
    std::string name;
    bool quantized;
    QuantFormat f;
    bool pure;
  };
  std::vector<Variant> variants{{"f32", false, QuantFormat::Q8_0, false}};
  for (QuantFormat f : formats) {
    variants.push_back({quant_format_name(f), true, f, false});
    if (f == QuantFormat::Q4_0) variants.push_back({"q4_0 pure", true, f, true});
  }
  int64_t targets = 0;
  for (const LMBatch& b : q.batches) targets += b.targets.numel();
  std::printf("\n%s: %zu held-out batches, %lld targets\n  %-9s %12s %10s %12s\n", q.path.c_str(), q.batches.size(),
              (long long)targets, "weights", ("loss (" + q.unit + ")").c_str(), "accuracy", "loss vs f32");
  const double per_unit = q.unit == "bits" ? 1 / std::log(2.0) : 1;
  double f32_loss = 0;
  for (const Variant& v : variants) {
    LanguageModel m(q.model);
    load_checkpoint(q.path, m, nullptr);
    m.eval();
    if (v.quantized) quantize_model(m, v.f, v.pure);
    NoGradGuard no_grad;
    double loss = 0, right = 0, counted = 0;
    for (const LMBatch& batch : q.batches) {
      const Tensor logits = m.forward(batch.inputs);
      const int64_t V = logits.size(-1), n = batch.targets.numel();
      const Tensor flat = reshape(logits, {n, V});
      const Tensor picked = argmax(flat, 1);
      int64_t scored = 0;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t want = batch.targets.data<int64_t>()[j];
        if (want == kIgnore) continue;
        right += picked.data<int64_t>()[j] == want;
        scored += 1;
      }
      // cross_entropy is the mean over the scored targets: weight it by their count.
      loss += cross_entropy(flat, reshape(batch.targets, {n})).item() * double(scored);
      counted += double(scored);
    }
    loss = loss / counted * per_unit;
    if (!v.quantized) f32_loss = loss;
    std::printf("  %-9s %12.5f %9.3f%% %+11.2f%%\n", v.name.c_str(), loss, 100 * right / counted,
                100 * (loss / f32_loss - 1));
  }
}

std::vector<QuantFormat> parse_formats(const std::string& s) {
  std::vector<QuantFormat> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    QuantFormat f;
    ENG_CHECK(parse_quant_format(item, f), "bench quant: --formats expects q8_0 and/or q4_0, got '", item, "'");
    out.push_back(f);
  }
  return out;
}

int bench_quant(int argc, char** argv) {
  Cli cli("bench quant", "Generation speed from f32, q8_0 and q4_0 weights: the medium model and one that streams "
          "its weights from memory.");
  auto& formats_text = cli.add_string("formats", "q8_0,q4_0", "quantized formats beside f32");
  auto& tokens = cli.add_int("tokens", 256, {1, 1 << 20}, "tokens generated per run (medium model: its context)");
  auto& big_tokens = cli.add_int("big-tokens", 16, {1, 1 << 20}, "tokens generated per run of the big model");
  auto& repeat = cli.add_int("repeat", 3, {1, 1000}, "runs per model; the best is reported");
  auto& big_factor = cli.add_int("big-factor", 4, {0, 1000}, "the big model's f32 weights are at least this many "
                                 "times the last-level cache (0: no big model)");
  auto& llc_mb = cli.add_int("llc-mb", 0, {0, 1 << 20}, "last-level cache in MB (0: as sysconf reports; 32 if none)");
  auto& threads = cli.add_int("threads", 1, {1, 1024}, "threads");
  auto& copy = cli.add_string("copy", "", "a copy-task checkpoint written by train: print its held-out loss and "
                              "accuracy from f32 and each format instead of the speeds");
  auto& eval_batches = cli.add_int("eval-batches", 50, {1, 1 << 20}, "held-out batches of 32 for --copy");
  auto& eval_seed = cli.add_int("eval-seed", 987654321, IntRange::at_least(0), "--copy: the seed of the held-out "
                                "batches (training draws its own from --seed)");
  auto& text = cli.add_string("text", "", "a byte-level text checkpoint written by train: print its bits per byte "
                              "and accuracy on the test split of --data, from f32 and each format, instead of the "
                              "speeds");
  auto& data = cli.add_string("data", "", "--text: the file it was trained on");
  if (!cli.parse(argc, argv, 2)) return 0;
  set_num_threads(int(threads));
  const std::vector<QuantFormat> formats = parse_formats(formats_text);
  if (!copy.empty() || !text.empty()) {
    ENG_CHECK(text.empty() || !data.empty(), "bench quant: --text needs --data, the file it was trained on");
    print_quality(!copy.empty() ? copy_quality(copy, eval_batches, eval_seed) : text_quality(text, data), formats);
    return 0;
  }
  std::printf("bench quant: kernels %s, %lld thread(s), best of %lld runs\n", quant_kernel_levels().back().c_str(),
              (long long)num_threads(), (long long)repeat);

  const TransformerConfig medium = model_config(6, 288, 6, 256);
  std::printf("\nmedium: 6 layers, d_model 288, 6 heads, FFN 1152, context 256; %lld tokens\n", (long long)tokens);
  time_formats(medium, formats, std::min<int64_t>(tokens, 256), repeat);

  if (big_factor == 0) return 0;
  int64_t llc = llc_mb > 0 ? llc_mb << 20 : last_level_cache();
  const bool guessed = llc <= 0;
  if (guessed) llc = int64_t(32) << 20;
  // d_model 1024 layers hold 12.6 M weights each (4 d² + 8 d², FFN 4 d): 50 MB of f32.
  const int64_t per_layer = 4 * (12 * 1024 * 1024);
  const int64_t layers = std::max<int64_t>(1, (big_factor * llc + per_layer - 1) / per_layer);
  const TransformerConfig big = model_config(layers, 1024, 16, big_tokens);
  std::printf("\nbig: %lld layers, d_model 1024, 16 heads, FFN 4096; f32 weights %.0f MB = %.1f x the last-level "
              "cache of %.0f MB%s; %lld tokens\n",
              (long long)layers, double(layers * per_layer) / 1e6, double(layers * per_layer) / double(llc),
              double(llc) / double(1 << 20), guessed ? " (assumed: sysconf reports none; set --llc-mb)" : "",
              (long long)big_tokens);
  time_formats(big, formats, big_tokens, repeat);
  std::printf("  memcpy on %.0f MB: %.2f GB/s copied\n", double(layers * per_layer) / 1e6,
              memcpy_gbs(layers * per_layer));
  return 0;
}

}  // namespace

ENG_REGISTER_BENCH("quant", "generation from f32, q8_0 and q4_0 weights: medium model, and GB/s on a model past the "
                   "last-level cache",
                   bench_quant);
