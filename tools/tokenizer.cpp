// tokenizer: trains, inspects and runs the BPE tokenizers of datasets/tokenizer.h (docs/tokenizers.md).
//   tokenizer train --vocab 4096 corpus.txt -o tok.json       a byte-level (GPT-2) BPE; --kind sentencepiece
//   tokenizer encode --tokenizer tok.json text.txt            ids, one line, separated by spaces
//   tokenizer decode --tokenizer tok.json ids.txt             the bytes back
//   tokenizer info --tokenizer tok.json                        kind, vocabulary, merges, special tokens
//   tokenizer convert --tokenizer tok.json --to llama2c -o tokenizer.bin   (json, gpt2: vocab.json + merges.txt)
// A tokenizer is read from a tokenizer.json, a vocab.json (with merges.txt beside it) or llama2.c's tokenizer.bin.
#include <chrono>
#include <cstdio>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "datasets/bpe_trainer.h"
#include "datasets/tokenizer_io.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/parse_number.h"
#include "engine/safe_text.h"
#include "tools/tool_main.h"

using namespace eng;

namespace {

std::string read_text(const std::string& path) {
  const std::vector<uint8_t> b = read_file_bytes(path, "tokenizer");
  return std::string(b.begin(), b.end());
}

void write_out(const std::string& path, const std::string& text) {
  if (path.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  write_file_atomic(path, std::vector<uint8_t>(text.begin(), text.end()), "tokenizer");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int train(int argc, char** argv) {
  Cli cli("tokenizer train", "Trains a BPE tokenizer on text files and writes it as a tokenizer.json.");
  auto& vocab = cli.add_int("vocab", 4096, {1, int64_t(1) << 24}, "tokens in all, special ones included");
  auto& kind = cli.add_string("kind", "byte-level", "byte-level (GPT-2) or sentencepiece (LLaMA: ▁, byte fallback)");
  auto& min_count = cli.add_int("min-count", 2, {1, INT64_MAX}, "a pair seen fewer times is never merged");
  auto& coverage = cli.add_double("coverage", 0.9995, RealRange::closed(0, 1),
                                  "sentencepiece: the share of character occurrences whose characters are tokens");
  auto& out = cli.add_string("out", "", "the tokenizer.json to write (also -o)");
  cli.add_positionals("CORPUS ...", "text files, each a text of its own");
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(!cli.positional().empty(), "tokenizer train: name at least one corpus file");
  ENG_CHECK(!out.empty(), "tokenizer train: -o / --out is required");
  ENG_CHECK(kind == "byte-level" || kind == "sentencepiece", "tokenizer train: --kind is byte-level or sentencepiece, not '",
            kind, "'");
  check_output_path(out, "tokenizer train");
  BpeTrainOptions o;
  o.kind = kind == "byte-level" ? TokenizerKind::ByteLevel : TokenizerKind::SentencePiece;
  o.vocab_size = vocab;
  o.min_count = min_count;
  o.char_coverage = coverage;
  std::vector<std::string> texts;
  size_t bytes = 0;
  for (const std::string& p : cli.positional()) texts.push_back(read_text(p)), bytes += texts.back().size();
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer tok = train_bpe(texts, o);
  save_tokenizer_json(tok, out);
  std::fprintf(stderr, "tokenizer train: %zu bytes -> %lld tokens (%zu merges) in %.1f s: %s\n", bytes,
               (long long)tok.vocab_size(), tok.merges().size(), seconds_since(t0), terminal_text(out).c_str());
  return 0;
}

int encode(int argc, char** argv) {
  Cli cli("tokenizer encode", "Encodes a file; writes its ids on one line, separated by spaces.");
  auto& path = cli.add_string("tokenizer", "", "the tokenizer file");
  auto& bos = cli.add_bool("bos", false, "put BOS first");
  auto& eos = cli.add_bool("eos", false, "put EOS last");
  auto& out = cli.add_string("out", "", "where to write the ids (default: standard output; also -o)");
  cli.add_positionals("FILE", "the text to encode", 1);
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(!path.empty() && cli.positional().size() == 1, "tokenizer encode: needs --tokenizer and one FILE");
  Tokenizer tok = load_tokenizer(path);
  const std::string text = read_text(cli.positional()[0]);
  std::vector<int32_t> ids;
  ENG_CHECK(!bos || tok.bos() >= 0, "tokenizer encode: --bos, but this tokenizer has no BOS token");
  ENG_CHECK(!eos || tok.eos() >= 0, "tokenizer encode: --eos, but this tokenizer has no EOS token");
  if (bos) ids.push_back(tok.bos());
  const auto t0 = std::chrono::steady_clock::now();
  tok.encode(text, ids);
  const double s = seconds_since(t0);
  if (eos) ids.push_back(tok.eos());
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  write_out(out, line + "\n");
  std::fprintf(stderr, "tokenizer encode: %zu bytes -> %zu tokens (%.2f bytes a token) in %.3f s\n", text.size(),
               ids.size(), double(text.size()) / double(std::max<size_t>(ids.size(), 1)), s);
  return 0;
}

int decode(int argc, char** argv) {
  Cli cli("tokenizer decode", "Decodes ids (a file of integers separated by white space) back to bytes.");
  auto& path = cli.add_string("tokenizer", "", "the tokenizer file");
  auto& specials = cli.add_bool("specials", false, "write special tokens (BOS, EOS) as their names");
  auto& out = cli.add_string("out", "", "where to write the text (default: standard output; also -o)");
  cli.add_positionals("IDS", "the file of ids", 1);
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(!path.empty() && cli.positional().size() == 1, "tokenizer decode: needs --tokenizer and one IDS file");
  const Tokenizer tok = load_tokenizer(path);
  const std::string text = read_text(cli.positional()[0]);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < text.size();) {
    const size_t begin = text.find_first_not_of(" \t\r\n", i);
    if (begin == std::string::npos) break;
    size_t end = text.find_first_of(" \t\r\n", begin);
    if (end == std::string::npos) end = text.size();
    ids.push_back(int32_t(parse_int(text.substr(begin, end - begin), {0, INT32_MAX}, "tokenizer decode: id")));
    i = end;
  }
  write_out(out, tok.decode(ids, specials));
  return 0;
}

int info(int argc, char** argv) {
  Cli cli("tokenizer info", "Prints what a tokenizer file holds.");
  auto& path = cli.add_string("tokenizer", "", "the tokenizer file");
  auto& show = cli.add_int("show", 10, {0, INT32_MAX}, "print this many of the last tokens made by merges");
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(!path.empty(), "tokenizer info: --tokenizer is required");
  const Tokenizer tok = load_tokenizer(path);
  std::map<TokenType, int64_t> types;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) ++types[tok.type(id)];
  std::printf("%s BPE: %lld tokens (%lld ordinary, %lld byte tokens, %lld special), %zu merges\n",
              tokenizer_kind_name(tok.kind()), (long long)tok.vocab_size(), (long long)types[TokenType::Normal],
              (long long)types[TokenType::Byte], (long long)types[TokenType::Special], tok.merges().size());
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (tok.type(id) == TokenType::Special)
      std::printf("special %d: %s%s%s\n", id, terminal_text(tok.bytes(id)).c_str(), id == tok.bos() ? " (BOS)" : "",
                  id == tok.eos() ? " (EOS)" : "");
  const size_t n = tok.merges().size(), first = n > size_t(show) ? n - size_t(show) : 0;
  for (size_t m = first; m < n; ++m) {
    const Tokenizer::Merge& g = tok.merges()[m];
    std::printf("merge %zu: \"%s\" + \"%s\"\n", m, terminal_text(tok.bytes(g.left)).c_str(),
                terminal_text(tok.bytes(g.right)).c_str());
  }
  return 0;
}

int convert(int argc, char** argv) {
  Cli cli("tokenizer convert", "Writes a tokenizer in another format.");
  auto& path = cli.add_string("tokenizer", "", "the tokenizer file to read");
  auto& to = cli.add_string("to", "json", "json (tokenizer.json), gpt2 (vocab.json + merges.txt) or llama2c");
  auto& out = cli.add_string("out", "", "the file to write (gpt2: the vocab.json; also -o)");
  auto& merges = cli.add_string("merges", "", "gpt2: the merges.txt to write (default: beside --out)");
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(!path.empty() && !out.empty(), "tokenizer convert: needs --tokenizer and -o / --out");
  const Tokenizer tok = load_tokenizer(path);
  if (to == "json") {
    save_tokenizer_json(tok, out);
  } else if (to == "llama2c") {
    save_llama2c(tok, out);
  } else if (to == "gpt2") {
    const size_t slash = out.rfind('/');
    save_gpt2_files(tok, out,
                    merges.empty() ? (slash == std::string::npos ? "" : out.substr(0, slash + 1)) + "merges.txt" : merges);
  } else {
    fail("tokenizer convert: --to is json, gpt2 or llama2c, not '", to, "'");
  }
  return 0;
}

int run(int argc, char** argv) {
  const std::map<std::string, int (*)(int, char**)> subs{
      {"train", train}, {"encode", encode}, {"decode", decode}, {"info", info}, {"convert", convert}};
  const std::string sub = argc > 1 ? argv[1] : "";
  const auto it = subs.find(sub);
  if (it == subs.end()) {
    std::fprintf(sub.empty() || sub == "--help" ? stdout : stderr,
                 "usage: tokenizer train|encode|decode|info|convert [flags]   (tokenizer SUB --help for its flags)\n");
    ENG_CHECK(sub.empty() || sub == "--help", "tokenizer: unknown subcommand '", sub, "'");
    return sub.empty() ? 1 : 0;
  }
  // "-o FILE", as users of other tools type it, is --out.
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args)
    if (a == "-o") a = "--out";
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  return it->second(int(ptrs.size()), ptrs.data());
}

}  // namespace

int main(int argc, char** argv) {
  return tool_main([&] { return run(argc, argv); }, "tokenizer: out of memory");
}
