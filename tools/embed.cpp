// The library embedded in a program of its own: rebuild the model a checkpoint describes, load its weights,
// and continue a prompt token by token with each layer's recurrent form. It links only libengine.a and the
// standard library:
//   g++ -std=c++17 -O2 -I. tools/embed.cpp -Wl,--whole-archive build/libengine.a -Wl,--no-whole-archive -pthread
// Usage: embed CHECKPOINT PROMPT [TOKENS]   (PROMPT: comma-separated token ids; greedy decoding)
#include <cstdio>
#include <map>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "engine/parse_number.h"
#include "engine/safe_text.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/transformer.h"
#include "ops/reduce.h"

using namespace eng;

namespace {

std::vector<int64_t> parse_ids(const std::string& text, int64_t vocab) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    ids.push_back(parse_int(item, {0, vocab - 1}, "embed: PROMPT entry " + std::to_string(ids.size() + 1)));
  ENG_CHECK(!ids.empty(), "embed: PROMPT is empty");
  return ids;
}

// The model a checkpoint written by train describes, from its "config.*" metadata (docs/checkpoint.md).
TransformerConfig model_config(const std::string& path) {
  const std::map<std::string, std::string> config = read_run_config(load_safetensors(path).metadata).model;
  ENG_CHECK(!config.empty(), "embed: ", path, " has no config.* metadata: not a checkpoint written by train");
  auto encoder = config.find("encoder_layers");
  ENG_CHECK(encoder == config.end() || encoder->second == "0", "embed: ", path,
            " does not hold a decoder-only language model (encoder_layers ", encoder->second, ")");
  TransformerConfig c;
  try {
    c = TransformerConfig::from_map(config);
  } catch (const Error& e) {
    fail("embed: ", path, ": ", e.what());
  }
  // Greedy decoding picks the largest logit; a mixture head (pixels --mixtures) outputs distribution parameters.
  ENG_CHECK(c.outputs == 0, "embed: ", path, " outputs ", c.outputs, " mixture parameters per position, not ",
            "token logits: greedy decoding does not apply");
  return c;
}

int run(int argc, char** argv) {
  Cli cli("embed", "Continues a prompt with a decoder-only checkpoint written by train (greedy decoding).");
  cli.add_positionals("CHECKPOINT PROMPT [TOKENS]", "the checkpoint; the prompt as comma-separated token ids; "
                      "how many tokens to generate (default 16)", 3);
  if (!cli.parse(argc, argv)) return 0;
  const std::vector<std::string>& args = cli.positional();
  ENG_CHECK(args.size() >= 2, "embed: expected CHECKPOINT and PROMPT (", cli.usage(), ")");
  const std::string& path = args[0];
  const int64_t tokens = args.size() == 3 ? parse_int(args[2], IntRange::at_least(1), "embed: TOKENS") : 16;

  LanguageModel model(model_config(path));
  const int64_t vocab = model.config().vocab, max_len = model.config().max_len;
  const std::vector<int64_t> prompt = parse_ids(args[1], vocab);
  const int64_t length = int64_t(prompt.size());
  // The last prompt token gives the first new one, so prompt + TOKENS - 1 positions are fed to the model.
  ENG_CHECK(length <= max_len, "embed: PROMPT has ", length, " tokens, more than the model's max_len of ", max_len);
  ENG_CHECK(tokens <= max_len - length + 1, "embed: TOKENS ", tokens, " after a prompt of ", length,
            " would run past the model's max_len of ", max_len, ": at most ", max_len - length + 1,
            " can be generated");
  load_checkpoint(path, model, nullptr);
  model.eval();

  NoGradGuard no_grad;
  LanguageModel::State state = model.new_state();
  std::vector<int64_t> out;
  for (int64_t t = 0; t < length + tokens - 1; ++t) {
    const int64_t id = t < length ? prompt[size_t(t)] : out.back();
    const Tensor logits = model.step(from_vector(std::vector<double>{double(id)}, {1}, DType::I64), state);
    if (t + 1 >= length) out.push_back(int64_t(argmax(logits, -1).item()));
  }
  for (size_t i = 0; i < out.size(); ++i) std::printf("%s%lld", i ? "," : "", (long long)out[i]);
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: embed: out of memory (the checkpoint's model does not fit in this machine's memory)\n");
  } catch (const std::exception& e) {  // a message may quote a string from the checkpoint
    std::fprintf(stderr, "error: %s\n", terminal_text(e.what()).c_str());
  }
  return 1;
}
