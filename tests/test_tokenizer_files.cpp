// Reference: each format as docs/tokenizers.md specifies it, written out here by hand (byte layouts, JSON text);
// what a reader builds is compared with the tokenizer the files came from, and each malformed file's message is
// pinned word for word.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "datasets/bpe_trainer.h"
#include "datasets/byte_unicode.h"
#include "datasets/tokenizer_io.h"
#include "engine/error.h"
#include "tests/temp_files.h"

using namespace eng;

namespace {

const std::string kText = "the cat sat on the mat; the cat's hat. Über die Katze, 日本語。\n the cat sat";

Tokenizer trained(TokenizerKind kind) {
  BpeTrainOptions o;
  o.kind = kind;
  o.vocab_size = kind == TokenizerKind::ByteLevel ? 290 : 330;
  o.min_count = 1;
  return train_bpe({kText}, o);
}

void check_same(const Tokenizer& a, const Tokenizer& b) {
  REQUIRE(a.vocab_size() == b.vocab_size());
  CHECK(a.kind() == b.kind());
  for (int32_t id = 0; id < a.vocab_size(); ++id) {
    CHECK(a.bytes(id) == b.bytes(id));
    CHECK(a.type(id) == b.type(id));
  }
  REQUIRE(a.merges().size() == b.merges().size());
  for (size_t m = 0; m < a.merges().size(); ++m) {
    CHECK(a.merges()[m].left == b.merges()[m].left);
    CHECK(a.merges()[m].right == b.merges()[m].right);
  }
  CHECK(a.bos() == b.bos());
  CHECK(a.eos() == b.eos());
}

// A byte-level vocab.json of the 256 bytes plus `extra` pieces, ids in that order.
std::string gpt2_vocab(const std::vector<std::string>& extra) {
  std::string v = "{";
  for (int i = 0; i < 256; ++i) {
    const std::string s = gpt2_spell_bytes(std::string(1, char(gpt2_byte_order(i))));
    v += (i ? "," : "") + std::string("\"") + (s == "\"" ? "\\\"" : s == "\\" ? "\\\\" : s) + "\":" + std::to_string(i);
  }
  for (size_t i = 0; i < extra.size(); ++i) v += ",\"" + extra[i] + "\":" + std::to_string(256 + i);
  return v + "}";
}

std::string bpe_json(const std::string& vocab, const std::string& merges) {
  return R"({"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},"model":{"type":"BPE","vocab":)" + vocab +
         R"(,"merges":)" + merges + "}}";
}

std::vector<uint8_t> llama2c_file(int32_t max_len, const std::vector<std::pair<float, std::string>>& tokens) {
  std::vector<uint8_t> out(4);
  std::memcpy(out.data(), &max_len, 4);
  for (const auto& [score, piece] : tokens) {
    const int32_t len = int32_t(piece.size());
    const size_t at = out.size();
    out.resize(at + 8);
    std::memcpy(out.data() + at, &score, 4);
    std::memcpy(out.data() + at + 4, &len, 4);
    out.insert(out.end(), piece.begin(), piece.end());
  }
  return out;
}

std::vector<std::pair<float, std::string>> llama2c_base() {
  std::vector<std::pair<float, std::string>> t = {{0, "<unk>"}, {0, "\n<s>\n"}, {0, "\n</s>\n"}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    t.push_back({0, name});
  }
  return t;
}

}  // namespace

TEST_CASE("tokenizer files: tokenizer.json, vocab.json + merges.txt and tokenizer.bin read back what was written") {
  test::TempDir dir;
  for (TokenizerKind kind : {TokenizerKind::ByteLevel, TokenizerKind::SentencePiece}) {
    Tokenizer tok = trained(kind);
    save_tokenizer_json(tok, dir.file("tok.json"));
    Tokenizer back = load_tokenizer(dir.file("tok.json"));
    check_same(tok, back);
    CHECK(back.encode(kText) == tok.encode(kText));
  }
  Tokenizer gpt = trained(TokenizerKind::ByteLevel);
  save_gpt2_files(gpt, dir.file("vocab.json"), dir.file("merges.txt"));
  check_same(gpt, load_tokenizer(dir.file("vocab.json")));
  CHECK_THROWS_WITH_AS(save_llama2c(gpt, dir.file("tok.bin")),
                       "tokenizer: tokenizer.bin holds SentencePiece-style BPE only; this tokenizer is byte-level", Error);

  Tokenizer sp = trained(TokenizerKind::SentencePiece);
  save_llama2c(sp, dir.file("tokenizer.bin"));
  Tokenizer bin = load_tokenizer(dir.file("tokenizer.bin"));
  REQUIRE(bin.vocab_size() == sp.vocab_size());
  for (int32_t id = 0; id < sp.vocab_size(); ++id) CHECK(bin.bytes(id) == sp.bytes(id));
  CHECK(bin.decode(bin.encode(kText)) == kText);
  CHECK(bin.encode(kText) == sp.encode(kText));  // scores -rank: the trained merges, in the same order
}

TEST_CASE("tokenizer.bin: merges by score, highest first, leftmost on ties, as llama2.c") {
  auto t = llama2c_base();
  // ids 259.. : " ", "a", "b", "ab" (score -1), " a" (score -2), "aa" (-1)
  for (auto [s, p] : std::vector<std::pair<float, std::string>>{
           {0, " "}, {0, "a"}, {0, "b"}, {-1, "ab"}, {-2, " a"}, {-1, "aa"}})
    t.push_back({s, p});
  test::TempDir dir;
  test::write_file(dir.file("t.bin"), llama2c_file(6, t));
  Tokenizer tok = load_tokenizer(dir.file("t.bin"));
  CHECK(tok.bos() == 1);
  CHECK(tok.eos() == 2);
  // " aab": (a,a) and (a,b) score -1, leftmost (a,a) merges; then " " + "aa" and "aa" + "b" are no tokens.
  CHECK(tok.encode("aab") == std::vector<int32_t>{259, 264, 261});
  // " ab": (a,b) at -1 beats ( ,a) at -2.
  CHECK(tok.encode("ab") == std::vector<int32_t>{259, 262});
  CHECK(tok.encode("\xc3\xa9") == std::vector<int32_t>{259, 3 + 0xC3, 3 + 0xA9});  // byte fallback: byte + 3
}

TEST_CASE("tokenizer files: a malformed file is refused, naming the file and what is wrong") {
  test::TempDir dir;
  const auto json_error = [&](const std::string& text) {
    test::write_file(dir.file("t.json"), std::vector<uint8_t>(text.begin(), text.end()));
    try {
      (void)load_tokenizer(dir.file("t.json"));
    } catch (const Error& e) {
      const std::string m = e.what();
      return m.substr(m.find("t.json") + 8);
    }
    return std::string("no error");
  };
  CHECK(json_error(R"({"model":{"type":"WordPiece"}})") == "the model is \"WordPiece\"; only BPE is supported");
  CHECK(json_error(bpe_json(gpt2_vocab({}), R"(["a zz"])")) ==
        "merge 0 \"a zz\" names a token that is not in the vocabulary");
  CHECK(json_error(bpe_json(gpt2_vocab({"ab"}), R"(["a"])")) ==
        "merge 0 \"a\" is not two tokens separated by one space");
  CHECK(json_error(bpe_json(gpt2_vocab({"xy"}), R"(["a b"])")) ==
        "merge 0 (\"a\" + \"b\") makes \"ab\", which is not in the vocabulary");
  CHECK(json_error(bpe_json(gpt2_vocab({" x"}), "[]")) == "token 256 \" x\" is not spelt in GPT-2's byte alphabet");
  CHECK(json_error(bpe_json(R"({"a":0})", "[]")) ==
        "the vocabulary has no token for the single byte 0 (byte-level BPE needs all 256)");
  CHECK(json_error(bpe_json(R"({"a":0,"b":0})", "[]")) == "tokens \"a\" and \"b\" share id 0");
  CHECK(json_error(bpe_json(R"({"a":0,"b":2})", "[]")) == "the ids of the 2 tokens are not 0..1 (id 2 is the largest)");
  CHECK(json_error(R"({"model":{"type":"BPE","vocab":{}}})") ==
        "neither GPT-2's byte-level BPE (pre_tokenizer ByteLevel) nor SentencePiece-style BPE (byte_fallback true, no "
        "pre-tokenizer or Metaspace); pre_tokenizer is null, which is not supported");
  CHECK(json_error(R"({"model":)").find("json: ") == 0);
  CHECK_THROWS_WITH_AS(parse_gpt2_files(R"({"a":1,"b":1})", "", "v"),
                       "v: vocab.json: the id of \"b\" is not a distinct integer in 0..1", Error);

  const auto bin_error = [&](const std::vector<uint8_t>& bytes) {
    test::write_file(dir.file("t.bin"), bytes);
    try {
      (void)load_tokenizer(dir.file("t.bin"));
    } catch (const Error& e) {
      const std::string m = e.what();
      return m.substr(m.find("t.bin") + 7);
    }
    return std::string("no error");
  };
  CHECK(bin_error({1, 0}) == "2 bytes, too short for the int32 max_token_length");
  CHECK(bin_error(llama2c_file(-3, {})) == "max_token_length is -3, not positive");
  CHECK(bin_error(llama2c_file(4, {{0, "<unk>"}})) == "token 0 has length 5, outside 0..4 (max_token_length)");
  CHECK(bin_error(llama2c_file(8, {{NAN, "a"}})) == "token 0 has score nan");
  std::vector<uint8_t> cut = llama2c_file(8, {{0, "abc"}});
  cut.pop_back();
  CHECK(bin_error(cut) == "token 0 needs 3 bytes, the file has 2 left");
  cut.resize(9);
  CHECK(bin_error(cut) == "token 0 at byte 4 is cut short (5 bytes left, a token needs a float32 score and an int32 length)");
  CHECK(bin_error(llama2c_file(8, {{0, "a"}})) ==
        "1 tokens; llama2.c's ids 0, 1, 2 are <unk>, BOS and EOS, so a vocabulary needs more");
  auto no_byte = llama2c_base();
  no_byte[3 + 0x41].second = "A";
  CHECK(bin_error(llama2c_file(8, no_byte)) == "the vocabulary has no byte token for 65 (byte fallback needs all 256)");

  test::write_file(dir.file("vocab.json"), {'{', '}'});
  test::write_file(dir.file("merges.txt"), {'a', '\n'});
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.file("vocab.json")),
                       ("tokenizer: " + dir.file("vocab.json") + " + " + dir.file("merges.txt") +
                        ": merges.txt line 1 \"a\" is not two tokens separated by one space")
                           .c_str(),
                       Error);
}
