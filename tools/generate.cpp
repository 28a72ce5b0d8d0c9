// Continues a prompt with a decoder-only checkpoint (one trained here, or one build/convert wrote), streaming each
// token to stdout as it is produced and the speed to stderr at the end. Each layer's recurrent form (KV cache or
// RNN state) is used where the attention variant has one; otherwise the whole sequence is recomputed for every
// token, and the tool says so. Sampling: models/sampling.h; the same --seed gives the same tokens.
// Prompt and output: with --tokenizer, text through it; with --ids, token ids (printed as ids unless a tokenizer
// is given); otherwise bytes (a byte-level model, vocab >= 256).
#include <chrono>
#include <cstdio>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/tokenizer_io.h"
#include "engine/autograd.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "engine/parse_number.h"
#include "engine/safe_text.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/sampling.h"
#include "models/transformer.h"
#include "ops/view.h"
#include "tools/tool_main.h"

using namespace eng;

namespace {

TransformerConfig model_config(const std::string& path) {
  const std::map<std::string, std::string> config = read_run_config(load_safetensors(path).metadata).model;
  ENG_CHECK(!config.empty(), "generate: ", path, " has no config.* metadata: not a checkpoint written by train or "
            "convert");
  TransformerConfig c;
  try {
    c = TransformerConfig::from_map(config);
  } catch (const Error& e) {
    fail("generate: ", path, ": ", e.what());
  }
  ENG_CHECK(c.encoder_layers == 0, "generate: ", path, " does not hold a decoder-only language model (encoder_layers ",
            c.encoder_layers, ")");
  ENG_CHECK(c.outputs == 0, "generate: ", path, " outputs ", c.outputs, " mixture parameters per position, not token "
            "logits");
  return c;
}

std::vector<int64_t> parse_ids(const std::string& text, int64_t vocab) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    ids.push_back(parse_int(item, {0, vocab - 1}, "generate: --ids entry " + std::to_string(ids.size() + 1)));
  return ids;
}

// Writes token `id` as the run prints them, and flushes: the reader sees each token when it is made.
struct Printer {
  Tokenizer* tok;
  bool as_ids;
  bool first = true;
  void operator()(int64_t id) {
    if (tok) {
      if (tok->type(int32_t(id)) != TokenType::Special) std::fputs(tok->bytes(int32_t(id)).c_str(), stdout);
    } else if (as_ids) {
      std::printf("%s%lld", first ? "" : ",", (long long)id);
    } else {
      std::fputc(int(id), stdout);
    }
    first = false;
    std::fflush(stdout);
  }
};

// Logits of the last position: the recurrent form consumes one token per call, the fallback reruns the sequence.
class Stepper {
 public:
  Stepper(const LanguageModel& m, bool recompute)
      : m_(m), recurrent_(!recompute && m.layers.front()->self_attn.mechanism().new_state()) {
    if (recurrent_) state_ = m.new_state();
  }
  bool recurrent() const { return recurrent_; }
  Tensor next(const std::vector<int64_t>& seq) {
    if (recurrent_) return m_.step(from_vector(std::vector<double>{double(seq.back())}, {1}, DType::I64), state_);
    std::vector<double> ids(seq.begin(), seq.end());
    const Tensor all = m_.forward(from_vector(ids, {1, int64_t(ids.size())}, DType::I64));
    return reshape(narrow(all, 1, int64_t(ids.size()) - 1, 1), {1, all.size(2)});
  }

 private:
  const LanguageModel& m_;
  bool recurrent_;
  LanguageModel::State state_;
};

int run(int argc, char** argv) {
  Cli cli("generate", "Continues a prompt with a decoder-only checkpoint, streaming the tokens to stdout.");
  cli.add_positionals("MODEL", "a checkpoint written by train or convert", 1);
  std::string& prompt = cli.add_string("prompt", "", "the prompt as text (bytes, or through --tokenizer)");
  std::string& ids_text = cli.add_string("ids", "", "the prompt as comma-separated token ids (instead of --prompt)");
  int64_t& max_tokens = cli.add_int("max-tokens", 64, {1, 1 << 24}, "tokens to generate");
  double& temperature = cli.add_double("temperature", 1.0, RealRange::closed(0, 100), "0: greedy (argmax)");
  int64_t& top_k = cli.add_int("top-k", 0, {0, 1 << 30}, "sample among the k most likely tokens (0: all)");
  double& top_p = cli.add_double("top-p", 1.0, {0, 1, true, false}, "nucleus: the most likely tokens of this mass "
                                 "(1: all)");
  int64_t& seed = cli.add_int("seed", 1, IntRange::at_least(0), "the sampling generator's seed");
  std::string& tokenizer = cli.add_string("tokenizer", "", "tokenizer.json, vocab.json or tokenizer.bin "
                                          "(docs/tokenizers.md)");
  bool& recompute = cli.add_bool("recompute", false, "recompute the whole sequence for every token even where the "
                                 "variant has a recurrent form (a check of it: the same tokens, greedy)");
  if (!cli.parse(argc, argv)) return 0;
  ENG_CHECK(cli.positional().size() == 1, "generate: expected MODEL (", cli.usage(), ")");
  const std::string& path = cli.positional()[0];
  ENG_CHECK(cli.was_set("prompt") != cli.was_set("ids"), "generate: give the prompt as --prompt or as --ids (one)");

  LanguageModel model(model_config(path));
  const int64_t vocab = model.config().vocab, max_len = model.config().max_len;
  std::optional<Tokenizer> tok;
  if (!tokenizer.empty()) tok.emplace(load_tokenizer(tokenizer));
  Tokenizer* tp = tok ? &*tok : nullptr;
  ENG_CHECK(!tp || tp->vocab_size() <= vocab, "generate: the tokenizer has ", tp ? tp->vocab_size() : 0,
            " tokens, more than the model's vocab of ", vocab);
  std::vector<int64_t> seq;
  if (cli.was_set("ids")) {
    seq = parse_ids(ids_text, vocab);
  } else if (tp) {
    for (int32_t id : tp->encode(prompt)) seq.push_back(id);
  } else {
    ENG_CHECK(vocab >= 256, "generate: --prompt as bytes needs a byte-level model (vocab >= 256, this one has ", vocab,
              "): give --tokenizer or --ids");
    for (unsigned char ch : prompt) seq.push_back(ch);
  }
  ENG_CHECK(!seq.empty(), "generate: the prompt is empty");
  const int64_t length = int64_t(seq.size());
  ENG_CHECK(length + max_tokens - 1 <= max_len, "generate: a prompt of ", length, " tokens and --max-tokens ",
            max_tokens, " run past the model's max_len of ", max_len, ": at most ", std::max<int64_t>(0, max_len -
            length + 1), " tokens can follow this prompt");
  load_checkpoint(path, model, nullptr);
  model.eval();

  NoGradGuard no_grad;
  Stepper stepper(model, recompute);
  if (!stepper.recurrent() && !recompute)
    std::fprintf(stderr, "generate: attention '%s' has no recurrent form: recomputing the whole sequence for every "
                 "token\n", model.config().attention.c_str());
  const SamplingOptions options{temperature, top_k, top_p};
  Rng rng{static_cast<uint64_t>(seed)};
  Printer print{tp, cli.was_set("ids") && !tp};
  const auto start = std::chrono::steady_clock::now();
  std::vector<int64_t> fed;  // the recurrent form takes the prompt one token at a time
  for (int64_t t = 0; t < length + max_tokens - 1; ++t) {
    fed.push_back(seq[size_t(t)]);
    const Tensor logits = stepper.next(fed).contiguous();
    if (t + 1 < length) continue;
    const int64_t id = sample_token(logits.data<float>(), vocab, options, rng);
    seq.push_back(id);
    print(id);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n");
  std::fprintf(stderr, "generate: %lld tokens in %.3f s, the prompt's %lld included: %.1f tokens/s (%s)\n",
               (long long)max_tokens, seconds, (long long)length, double(max_tokens) / seconds,
               stepper.recurrent() ? "recurrent form" : "recomputation");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tool_main([&] { return run(argc, argv); }, "generate: out of memory");
}
