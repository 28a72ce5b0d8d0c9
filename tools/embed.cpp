// The library embedded in a program of its own: rebuild the model a checkpoint describes, load its weights,
// and continue a prompt token by token with each layer's recurrent form. It links only libengine.a and the
// standard library:
//   g++ -std=c++17 -O2 -I. tools/embed.cpp -Wl,--whole-archive build/libengine.a -Wl,--no-whole-archive -pthread
// Usage: embed CHECKPOINT PROMPT [TOKENS]   (PROMPT: comma-separated token ids; greedy decoding)
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/transformer.h"
#include "ops/reduce.h"

using namespace eng;

static std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
    }
    ENG_CHECK(used == item.size() && id >= 0, "embed: prompt entry '", item, "' is not a token id");
    ids.push_back(id);
  }
  ENG_CHECK(!ids.empty(), "embed: the prompt is empty");
  return ids;
}

int main(int argc, char** argv) {
  try {
    ENG_CHECK(argc == 3 || argc == 4, "usage: embed CHECKPOINT PROMPT [TOKENS]");
    const std::string path = argv[1];
    const std::vector<int64_t> prompt = parse_ids(argv[2]);
    const int64_t tokens = argc == 4 ? std::stoll(argv[3]) : 16;

    // The model's shape is in the checkpoint's "config.*" metadata (docs/checkpoint.md).
    std::map<std::string, std::string> config;
    const std::map<std::string, std::string> meta = load_safetensors(path).metadata;
    for (const auto& [key, value] : meta)
      if (key.rfind("config.", 0) == 0 && key != "config.task" && key != "config.symbols" &&
          key != "config.fixed_length")
        config[key.substr(7)] = value;
    ENG_CHECK(config.count("decoder_layers") && config.at("encoder_layers") == "0",
              "embed: ", path, " does not hold a decoder-only language model");
    LanguageModel model(TransformerConfig::from_map(config));
    load_checkpoint(path, model, nullptr);
    model.eval();

    NoGradGuard no_grad;
    LanguageModel::State state = model.new_state();
    const int64_t vocab = model.config().vocab;
    Tensor logits;
    std::vector<int64_t> out;
    for (int64_t t = 0; t < int64_t(prompt.size()) + tokens - 1 && t < model.config().max_len; ++t) {
      const int64_t id = t < int64_t(prompt.size()) ? prompt[size_t(t)] : out.back();
      ENG_CHECK(id < vocab, "embed: token ", id, " is outside the vocabulary of ", vocab);
      logits = model.step(from_vector(std::vector<double>{double(id)}, {1}, DType::I64), state);
      if (t + 1 >= int64_t(prompt.size())) out.push_back(int64_t(argmax(logits, -1).item()));
    }
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%lld", i ? "," : "", (long long)out[i]);
    std::printf("\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
