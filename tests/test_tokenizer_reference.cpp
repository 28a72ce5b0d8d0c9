// Reference: tools/reference/bpe_reference.py, Python written from GPT-2's encoder.py, the SentencePiece-style BPE of
// LLaMA's tokenizer.json and llama2.c's run.c, sharing no code with datasets/. Its outputs are committed in
// tests/data/tokenizer/: a 1 MB corpus (dpkg's manual pages in eleven languages), the tokenizers it trained on the
// corpus's first 200,000 bytes, and the ids it encoded. Here the C++ reads those files, encodes and decodes the
// whole corpus, and trains on the same bytes.
#include <doctest/doctest.h>

#include <cstring>

#include "datasets/bpe_trainer.h"
#include "datasets/inflate.h"
#include "datasets/tokenizer_io.h"
#include "engine/file_io.h"

using namespace eng;

namespace {

const std::string kDir = "tests/data/tokenizer/";
constexpr size_t kTrainBytes = 200000;  // TRAIN_BYTES of the script
constexpr int64_t kVocab = 800;

const std::string& corpus() {
  static const std::string text = [] {
    const std::vector<uint8_t> b = gunzip(read_file_bytes(kDir + "corpus.txt.gz", "test"), "corpus.txt.gz");
    return std::string(b.begin(), b.end());
  }();
  return text;
}

std::vector<int32_t> reference_ids(const std::string& name) {
  const std::vector<uint8_t> b = gunzip(read_file_bytes(kDir + name, "test"), name);
  REQUIRE(b.size() % 2 == 0);
  std::vector<int32_t> ids(b.size() / 2);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(b[2 * i] | b[2 * i + 1] << 8);
  return ids;
}

// The index of the first difference, or -1: a failure then says where, not only that.
int64_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i]) return int64_t(i);
  return a.size() == b.size() ? -1 : int64_t(std::min(a.size(), b.size()));
}

void check_corpus(Tokenizer tok, const std::string& ids_file) {
  const std::vector<int32_t> expect = reference_ids(ids_file);
  const std::vector<int32_t> ids = tok.encode(corpus());
  INFO(ids_file, ": ", ids.size(), " ids, the reference ", expect.size());
  CHECK(first_difference(ids, expect) == -1);
  CHECK(tok.decode(expect) == corpus());
}

std::vector<std::pair<std::string, std::string>> merge_bytes(const Tokenizer& t) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Tokenizer::Merge& m : t.merges()) out.emplace_back(t.bytes(m.left), t.bytes(m.right));
  return out;
}

}  // namespace

TEST_CASE("tokenizer reference: the corpus is over 1 MB and holds non-ASCII text") {
  CHECK(corpus().size() > 1000000);
  size_t non_ascii = 0;
  for (char c : corpus()) non_ascii += (uint8_t(c) & 0xC0) == 0xC0;  // lead bytes: one per non-ASCII character
  CHECK(non_ascii > 10000);
  CHECK(corpus().find("\xe3\x83\x91\xe3\x83\x83\xe3\x82\xb1\xe3\x83\xbc\xe3\x82\xb8") != std::string::npos);  // パッケージ
}

TEST_CASE("tokenizer reference: byte-level BPE encodes and decodes the corpus as GPT-2's algorithm does") {
  check_corpus(load_tokenizer(kDir + "gpt2_vocab.json"), "gpt2_ids.u16.gz");
  check_corpus(load_tokenizer(kDir + "gpt2_tokenizer.json"), "gpt2_ids.u16.gz");
}

TEST_CASE("tokenizer reference: SentencePiece-style BPE encodes and decodes the corpus as the reference does") {
  check_corpus(load_tokenizer(kDir + "sp_tokenizer.json"), "sp_ids.u16.gz");
}

TEST_CASE("tokenizer reference: llama2.c's tokenizer.bin encodes each line as run.c does") {
  Tokenizer tok = load_tokenizer(kDir + "sp_tokenizer.bin");
  const std::vector<int32_t> flat = reference_ids("llama2c_ids.u16.gz");
  size_t pos = 0, line_begin = 0, lines = 0;
  while (pos < flat.size()) {
    const size_t n = size_t(flat[pos++]);
    REQUIRE(pos + n <= flat.size());
    const std::vector<int32_t> expect(flat.begin() + int64_t(pos), flat.begin() + int64_t(pos + n));
    pos += n;
    size_t line_end = corpus().find('\n', line_begin);
    if (line_end == std::string::npos) line_end = corpus().size();
    const std::string line = corpus().substr(line_begin, line_end - line_begin);
    line_begin = line_end + 1;
    INFO("line ", lines, ": ", line);
    CHECK(tok.encode(line) == expect);
    CHECK(tok.decode(expect) == line);
    ++lines;
  }
  CHECK(lines == 2000);
}

TEST_CASE("tokenizer reference: our trainer makes the reference trainer's merges; the committed tokenizers it trained") {
  const std::string train(corpus(), 0, kTrainBytes);
  for (TokenizerKind kind : {TokenizerKind::ByteLevel, TokenizerKind::SentencePiece}) {
    const bool gpt2 = kind == TokenizerKind::ByteLevel;
    BpeTrainOptions o;
    o.kind = kind;
    o.vocab_size = kVocab;
    const Tokenizer ours = train_bpe({train}, o);
    const Tokenizer ref = load_tokenizer(kDir + (gpt2 ? "gpt2_tokenizer.json" : "sp_tokenizer.json"));
    INFO(tokenizer_kind_name(kind));
    CHECK(ours.vocab_size() == kVocab);
    CHECK(merge_bytes(ours) == merge_bytes(ref));
    for (int32_t id = 0; id < kVocab; ++id) CHECK(ours.bytes(id) == ref.bytes(id));
    // `build/tokenizer train --vocab 800 [--kind sentencepiece] train.txt -o trained_*.json` wrote these.
    const std::vector<uint8_t> file = read_file_bytes(kDir + (gpt2 ? "trained_gpt2.json" : "trained_sp.json"), "test");
    CHECK(std::string(file.begin(), file.end()) == tokenizer_json(ours));
  }
}
