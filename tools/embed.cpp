// The library embedded in a program of its own: rebuild the model a checkpoint describes, map its weights (read
// once, zero copy: engine/safetensors.h's map_safetensors), and continue a prompt token by token with each layer's
// recurrent form, allocating nothing per token (models/generator.h). It links only libengine.a and the standard
// library (`make embed VARIANTS="softmax causal-linear"` links only the variants named: docs/embedding.md):
//   g++ -std=c++17 -O2 -I. tools/embed.cpp tools/registration/all_variants.cpp build/libengine.a -pthread
// Usage: embed CHECKPOINT PROMPT [TOKENS] [--stats] [--read] [--tensor-step]
//   (PROMPT: comma-separated token ids; greedy decoding). --stats prints what docs/checkpoint.md reports.
// `make embed` compiles it with ENG_EMBED_GENERATOR_ONLY: no model is built (the Generator reads the checkpoint's
// tensors, models/generator_checkpoint.h), there is no --tensor-step, and a model the Generator cannot run is
// refused, so that no layer, attention class or Tensor op is linked.
#include <sys/resource.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <algorithm>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/parse_number.h"
#include "engine/safe_text.h"
#include "engine/safetensors.h"
#include "engine/skip_init.h"
#include "models/checkpoint.h"
#include "models/generator.h"
#include "models/generator_checkpoint.h"
#include "models/transformer.h"
#include "ops/reduce.h"
#include "tools/heap_count.h"
#include "tools/tool_main.h"

using namespace eng;

#ifdef ENG_EMBED_GENERATOR_ONLY
// The attention variants this build accepts (`make embed VARIANTS=...`): generated with it
// (build/embed-lean/variants.cpp). The Generator runs their step forms itself, so no variant's class is linked.
const std::vector<std::string>& embed_variants();

#endif

namespace {

#ifdef ENG_EMBED_GENERATOR_ONLY
constexpr bool generator_only = true;

void check_variant(const std::string& attention) {
  const std::vector<std::string>& names = embed_variants();
  if (std::find(names.begin(), names.end(), attention) != names.end()) return;
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  fail("attention: unknown variant '", terminal_text(attention), "' (known: ", known, ")");
}
#else
constexpr bool generator_only = false;
#endif

std::vector<int64_t> parse_ids(const std::string& text, int64_t vocab) {
  std::vector<int64_t> ids;
  for (size_t begin = 0; begin < text.size();) {  // entries between commas; a trailing comma ends the list
    const size_t end = std::min(text.find(',', begin), text.size());
    ids.push_back(parse_int(text.substr(begin, end - begin), {0, vocab - 1},
                            "embed: PROMPT entry " + std::to_string(ids.size() + 1)));
    begin = end + 1;
  }
  ENG_CHECK(!ids.empty(), "embed: PROMPT is empty");
  return ids;
}

// The model a checkpoint written by train describes, from its "config.*" metadata (docs/checkpoint.md).
TransformerConfig model_config(const std::string& path, const std::map<std::string, std::string>& metadata) {
  const std::map<std::string, std::string> config = read_run_config(metadata).model;
  ENG_CHECK(!config.empty(), "embed: ", path, " has no config.* metadata: not a checkpoint written by train");
  auto encoder = config.find("encoder_layers");
  ENG_CHECK(encoder == config.end() || encoder->second == "0", "embed: ", path,
            " does not hold a decoder-only language model (encoder_layers ", encoder->second, ")");
  TransformerConfig c;
#if defined(__cpp_exceptions)
  try {
    c = TransformerConfig::from_map(config);
  } catch (const Error& e) {
    fail("embed: ", path, ": ", e.what());
  }
#else
  c = TransformerConfig::from_map(config);  // the handler gets the config's message alone
#endif
  // Greedy decoding picks the largest logit; a mixture head (pixels --mixtures) outputs distribution parameters.
  ENG_CHECK(c.outputs == 0, "embed: ", path, " outputs ", c.outputs, " mixture parameters per position, not ",
            "token logits: greedy decoding does not apply");
  return c;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The process's CPU time: on a shared machine, a figure other programs' load does not inflate as it does wall time.
double cpu_ms() { return 1000.0 * double(std::clock()) / CLOCKS_PER_SEC; }

double peak_rss_mb() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024;  // KiB on Linux
}

int run(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  Cli cli("embed", "Continues a prompt with a decoder-only checkpoint written by train (greedy decoding).");
  cli.add_positionals("CHECKPOINT PROMPT [TOKENS]", "the checkpoint; the prompt as comma-separated token ids; "
                      "how many tokens to generate (default 16)", 3);
  const bool& stats = cli.add_bool("stats", false, "print to stderr the time to the first generated token, the peak "
                                   "RSS, the time and the allocations per token after the first");
  const bool& read = cli.add_bool("read", false, "read the checkpoint into copies instead of mapping it");
#ifndef ENG_EMBED_GENERATOR_ONLY
  const bool& tensor_step = cli.add_bool("tensor-step", false, "generate with LanguageModel::step (the Tensor path, "
                                         "which allocates per op) even where the allocation-free Generator runs");
#endif
  if (!cli.parse(argc, argv)) return 0;
  const std::vector<std::string>& args = cli.positional();
  ENG_CHECK(args.size() >= 2, "embed: expected CHECKPOINT and PROMPT (", cli.usage(), ")");
  const std::string& path = args[0];
  const int64_t tokens = args.size() == 3 ? parse_int(args[2], IntRange::at_least(1), "embed: TOKENS") : 16;

  // The file is read once: its metadata gives the model, its tensors the weights.
  const SafetensorsFile file = read ? load_safetensors(path) : map_safetensors(path);
  const double opened_cpu = cpu_ms();
  const TransformerConfig config = model_config(path, file.metadata);
  const int64_t vocab = config.vocab, max_len = config.max_len;
  const std::vector<int64_t> prompt = parse_ids(args[1], vocab);
  const int64_t length = int64_t(prompt.size());
  // The last prompt token gives the first new one, so prompt + TOKENS - 1 positions are fed to the model.
  ENG_CHECK(length <= max_len, "embed: PROMPT has ", length, " tokens, more than the model's max_len of ", max_len);
  ENG_CHECK(tokens <= max_len - length + 1, "embed: TOKENS ", tokens, " after a prompt of ", length,
            " would run past the model's max_len of ", max_len, ": at most ", max_len - length + 1,
            " can be generated");
#ifdef ENG_EMBED_GENERATOR_ONLY
  // No model is built: the Generator reads the checkpoint's tensors (models/generator_checkpoint.h), the weights
  // being the mapping's pages, so no layer, attention class or Tensor op is linked.
  check_variant(config.attention);
  const std::string unsupported = generator_unsupported(config);
  ENG_CHECK(unsupported.empty(), "embed: ", path, ": the model has ", unsupported,
            "; only LanguageModel::step runs it, which this lean build leaves out");
  const double built_cpu = cpu_ms();
  auto gen = std::make_unique<Generator>(generator_weights(file, path, config));
  const double loaded_cpu = cpu_ms();
  const bool generator = true;
  auto next = [&](int64_t id) {
    const float* logits = gen->step(id);
    return int64_t(std::max_element(logits, logits + gen->outputs()) - logits);
  };
#else
  std::unique_ptr<LanguageModel> built;
  {
    // Every weight comes from the checkpoint, so a model the Generator runs is built without drawing initial ones
    // (engine/skip_init.h); any other is built again, as usual.
    SkipRandomInitGuard skip;
    built = std::make_unique<LanguageModel>(config);
  }
  if (!Generator::unsupported(*built).empty()) built = std::make_unique<LanguageModel>(config);
  LanguageModel& model = *built;
  const double built_cpu = cpu_ms();
  if (read)
    load_checkpoint(file, path, model, nullptr);
  else
    bind_checkpoint(file, path, model);  // the weights are the mapping's pages
  // The initial weights the checkpoint replaced stay in the allocator's cache: never touched (engine/skip_init.h),
  // they hold no page, and unmapping them (allocator::empty_cache) cost ~3 ms of the first token.
  const double loaded_cpu = cpu_ms();
  model.eval();

  NoGradGuard no_grad;
  const bool generator = !tensor_step && Generator::unsupported(model).empty();
  std::unique_ptr<Generator> gen = generator ? std::make_unique<Generator>(model) : nullptr;
  LanguageModel::State state = generator ? LanguageModel::State() : model.new_state();
  auto next = [&](int64_t id) -> int64_t {
    if (gen) {
      const float* logits = gen->step(id);
      return int64_t(std::max_element(logits, logits + gen->outputs()) - logits);
    }
    return int64_t(argmax(model.step(from_vector(std::vector<double>{double(id)}, {1}, DType::I64), state), -1).item());
  };
#endif
  std::vector<int64_t> out;
  out.reserve(size_t(tokens));
  for (int64_t t = 0; t < length; ++t) {
    const int64_t id = next(prompt[size_t(t)]);
    if (t + 1 == length) out.push_back(id);
  }
  const double first_ms = ms_since(start), first_cpu = cpu_ms(), first_rss = peak_rss_mb();
  const auto after_first = std::chrono::steady_clock::now();
  const uint64_t blocks = allocator::stats().allocs;
  uint64_t heap = 0;
  {
    heap_count::Scope count;
    while (int64_t(out.size()) < tokens) out.push_back(next(out.back()));
    heap = count.allocations();
  }
  const double rest_ms = ms_since(after_first), rest_cpu = cpu_ms() - first_cpu;
  for (size_t i = 0; i < out.size(); ++i) std::printf("%s%lld", i ? "," : "", (long long)out[i]);
  std::printf("\n");
  if (stats) {
    const double file_mb = double(InputFile(path, "embed").size()) / (1024 * 1024), per = double(tokens - 1);
    const double end_rss = peak_rss_mb();
    std::fprintf(stderr, "embed: %s %.1f MiB file (%lld tensors copied), %s\n", read ? "read" : "mapped", file_mb,
                 (long long)file.copied, generator ? "Generator" : "LanguageModel::step");
    std::fprintf(stderr, "embed: first token after %.1f ms (%.1f ms CPU), peak RSS %.1f MiB (%.2fx the file); at the "
                 "end %.1f MiB (%.2fx)\n", first_ms, first_cpu, first_rss, first_rss / file_mb, end_rss,
                 end_rss / file_mb);
    std::fprintf(stderr, "embed: CPU before the first step: %.1f ms until the file is open (program start included), "
                 "%.1f ms to %s, %.1f ms to load it (the CRC-32 reads all the data)\n", opened_cpu,
                 built_cpu - opened_cpu, generator_only ? "check the configuration (no model is built)" : "build the model",
                 loaded_cpu - built_cpu);
    if (per > 0)
      std::fprintf(stderr, "embed: per token after the first (%lld): %.0f us (%.0f us CPU), %.1f heap allocations, "
                   "%.1f allocator blocks\n", (long long)(tokens - 1), rest_ms * 1000 / per, rest_cpu * 1000 / per,
                   double(heap) / per, double(allocator::stats().allocs - blocks) / per);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tool_main([&] { return run(argc, argv); },
                   "embed: out of memory (the checkpoint's model does not fit in this machine's memory)");
}
