#include "tests/fuzz/targets.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "datasets/bpe_trainer.h"
#include "datasets/cifar10.h"
#include "datasets/idx.h"
#include "datasets/inflate.h"
#include "datasets/text.h"
#include "datasets/tokenizer_io.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "models/quantized.h"
#include "models/attention/attention.h"

namespace eng::fuzz {

namespace {

// The readers take paths, so each input goes through a file of this process's own, removed when it exits.
struct InputFile {
  const std::string path = "/tmp/eng_fuzz_" + std::to_string(getpid()) + ".bin";
  ~InputFile() { std::remove(path.c_str()); }
};

std::string write_input(const uint8_t* data, size_t size) {
  static const InputFile file;
  const std::string& path = file.path;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ENG_CHECK(f, "fuzz: cannot write ", path);
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

// Runs `read`; an eng::Error is the reader refusing the input, which is correct behaviour.
template <class F>
int expect_result_or_error(F read) {
  try {
    read();
  } catch (const Error&) {
  }
  return 0;
}

// What a tokenizer that was read must do with any text: encode it, decode it back, and decode every id.
void exercise(Tokenizer& tok, const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (tok.decode(tok.encode(text)) != text) std::abort();  // a lossy round trip is a bug, not a refusal
  std::vector<int32_t> all;
  for (int32_t id = 0; id < tok.vocab_size() && id < 4096; ++id) all.push_back(id);
  (void)tok.decode(all, true);
}

}  // namespace

// The three ways in (read, mapped, a buffer) share one validation: each must accept what the others accept, with
// the same bytes, and refuse what they refuse with the same message. The buffer is libFuzzer's own allocation of
// exactly `size` bytes, so a read past the end is an AddressSanitizer report.
int safetensors(const uint8_t* data, size_t size) {
  const std::string path = write_input(data, size);
  auto outcome = [](auto read) -> std::pair<std::string, std::vector<std::vector<double>>> {
    try {
      std::vector<std::vector<double>> values;
      for (const auto& [name, t] : read().tensors) values.push_back(t.to_vector());
      return {"", values};
    } catch (const Error& e) {
      return {e.what(), {}};
    }
  };
  const auto loaded = outcome([&] { return load_safetensors(path); });
  const auto mapped = outcome([&] { return map_safetensors(path); });
  const auto viewed = outcome([&] { return view_safetensors(data, size, path); });
  auto same = [](const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)  // bit for bit, NaN payloads included
      if (a[i].size() != b[i].size() || (!a[i].empty() && std::memcmp(a[i].data(), b[i].data(), a[i].size() * 8)))
        return false;
    return true;
  };
  if (loaded.first != mapped.first || loaded.first != viewed.first) std::abort();
  if (!same(loaded.second, mapped.second) || !same(loaded.second, viewed.second)) std::abort();
  return 0;
}

namespace {

// A layer with one quantizable [4, 64] weight and an f32 bias, as a Linear layer registers them.
struct QuantizableLayer : Module {
  Tensor weight, bias;
  QuantizableLayer() {
    weight = register_parameter("weight", zeros({4, 64}));
    bias = register_parameter("bias", zeros({4}));
    set_quantizable("weight", true);
  }
};

}  // namespace

int quantized(const uint8_t* data, size_t size) {
  const std::string path = write_input(data, size);
  return expect_result_or_error([&] {
    // load_checkpoint's checks of quantized tensors, without its CRC-32, which a mutated input seldom keeps.
    const SafetensorsFile f = load_safetensors(path);
    QuantizableLayer layer;
    std::vector<std::string> names;
    for (const auto& [name, p] : layer.named_parameters()) {
      names.push_back("model." + name);
      for (const auto& [key, t] : f.tensors) {
        if (key != "model." + name || !check_quantized_parameter(path, name, p.shape(), t, name == "weight", f.metadata))
          continue;
        const QuantFormat format = quant_format_of(t, "fuzz");  // what Linear and Embedding then do with it
        (void)quant_linear(ones({3, 64}), t, format, layer.bias);
        (void)quant_embedding(t, format, from_vector(std::vector<double>{0, 3, 1}, {3}, DType::I64));
      }
    }
    check_quant_keys(path, f.metadata, names);
  });
}

int idx(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t ndim = data[0] % 5;
  const std::string path = write_input(data + 1, size - 1);
  return expect_result_or_error([&] {
    IdxArray a = read_idx(path, ndim);
    ENG_CHECK(int64_t(a.data.size()) == shape_numel(a.shape), "fuzz: idx data and shape disagree");
  });
}

int cifar10(const uint8_t* data, size_t size) {
  const std::string path = write_input(data, size);
  return expect_result_or_error([&] { (void)read_cifar10_batch(path, "fuzz").size(); });
}

int text(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t len = 1 + data[0] % 16;
  const std::string path = write_input(data + 1, size - 1);
  return expect_result_or_error([&] {
    TextCorpus corpus(path);
    Rng rng(7);
    for (TextSplit s : {TextSplit::Train, TextSplit::Valid, TextSplit::Test}) {
      if (corpus.num_windows(s, len) > 0) (void)corpus.windows(s, 0, 1, len);
      (void)corpus.sample(s, rng, 0, 2, len);
    }
  });
}

int gunzip(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  // A 16 MiB output bound: a small input that inflates beyond it must be refused, not followed.
  constexpr size_t kBound = size_t(1) << 24;
  expect_result_or_error([&] { (void)eng::gunzip(bytes, "fuzz input", kBound); });
  expect_result_or_error([&] { (void)zlib_decompress(bytes, "fuzz input", kBound); });
  return expect_result_or_error([&] { (void)inflate_raw(data, size, "fuzz input", nullptr, kBound); });
}

int cli(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"fuzz"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += char(data[i]);
    }
  }
  args.push_back(cur);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return expect_result_or_error([&] {
    Cli c("fuzz", "fuzz target");
    c.add_int("steps", 1, {0, 1000}, "an integer");
    c.add_positionals("ARG ...", "anything");
    c.add_double("lr", 1e-3, RealRange::above(0), "a real");
    c.add_string("task", "copy", "a string");
    c.add_bool("fixed", false, "a boolean");
    auto& opts = c.add_list("attn-opt", "name=value pairs");
    if (!c.parse(int(argv.size()), argv.data())) return;
    AttentionOptions o;
    for (const std::string& kv : opts) o.set_pair(kv, "fuzz");
    for (const auto& item : o.items()) {
      const std::string& key = item.first;
      expect_result_or_error([&] { (void)o.get_int(key, 0, IntRange{}); });
      expect_result_or_error([&] { (void)o.get_double(key, 0, RealRange{}); });
      expect_result_or_error([&] { (void)o.get_bool(key, false); });
    }
  });
}

int tokenizer_json(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  return expect_result_or_error([&] {
    Tokenizer tok = parse_tokenizer_json(text, "fuzz");
    exercise(tok, data, std::min<size_t>(size, 256));
  });
}

int gpt2_vocab(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t cut = std::min(all.find('\0'), all.size());
  return expect_result_or_error([&] {
    Tokenizer tok = parse_gpt2_files(all.substr(0, cut), all.substr(std::min(cut + 1, all.size())), "fuzz");
    exercise(tok, data, std::min<size_t>(size, 256));
  });
}

int tokenizer_bin(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> file(data, data + size);
  return expect_result_or_error([&] {
    Tokenizer tok = parse_llama2c(file, "fuzz");
    exercise(tok, data, std::min<size_t>(size, 256));
  });
}

int tokenize(const uint8_t* data, size_t size) {
  static const std::string corpus = "the cat sat on the mat; the cat's hat. \xc3\x9c""ber die Katze, \xe6\x97\xa5\xe6\x9c\xac. ";
  static Tokenizer byte_level = train_bpe({corpus, corpus}, BpeTrainOptions{TokenizerKind::ByteLevel, 300, 1, 1});
  static Tokenizer sentencepiece =
      train_bpe({corpus, corpus}, BpeTrainOptions{TokenizerKind::SentencePiece, 330, 1, 1});
  exercise(byte_level, data, size);
  exercise(sentencepiece, data, size);
  std::vector<int32_t> ids;  // the input read as ids, most of them outside the vocabulary
  for (size_t i = 0; i + 1 < size; i += 2) ids.push_back(int32_t(data[i] | data[i + 1] << 8) - 16);
  return expect_result_or_error([&] { (void)byte_level.decode(ids, true); });
}

const std::vector<Target>& targets() {
  static const std::vector<Target> all{
      {"safetensors", safetensors}, {"idx", idx},     {"cifar10", cifar10},     {"text", text},
      {"gunzip", gunzip},           {"cli", cli},     {"tokenizer_json", tokenizer_json},
      {"gpt2_vocab", gpt2_vocab},   {"tokenizer_bin", tokenizer_bin},           {"tokenize", tokenize},
      {"quantized", quantized}};
  return all;
}

}  // namespace eng::fuzz
