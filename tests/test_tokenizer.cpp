// References: GPT-2's pre-tokenisation regular expression as Python's `regex` module splits the strings below (the
// expected lists were printed by it; tools/reference/bpe_reference.py holds the pattern); GPT-2's bpe() loop,
// rewritten here over ids (merge every occurrence of the lowest-ranked pair, repeat) against BpeMerges' heap;
// small training runs worked out by hand; the text corpus's tokens against encoding its splits directly.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "datasets/bpe_trainer.h"
#include "datasets/byte_unicode.h"
#include "datasets/pretokenize.h"
#include "datasets/text.h"
#include "datasets/tokenizer.h"
#include "datasets/unicode_class.h"
#include "engine/error.h"
#include "tests/temp_files.h"

using namespace eng;

namespace {

std::vector<std::string> pretokens(const std::string& text) {
  std::vector<std::string> out;
  for_each_gpt2_pretoken(text, [&](std::string_view w) { out.emplace_back(w); });
  return out;
}

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() % 256);
  return s;
}

// Text mixing words, spaces, digits, accented and CJK characters and broken UTF-8.
std::string random_text(std::mt19937& rng, size_t pieces) {
  const std::vector<std::string> parts = {"the", " cat", " ", "  ", "\n", "\n\n", "123", " 4", "don't", "'s", "é",
                                          "日本", "\xff", "\xe2\x82", "?!", "\t", "\xe2\x96\x81", "<|endoftext|>"};
  std::string s;
  for (size_t i = 0; i < pieces; ++i) s += parts[rng() % parts.size()];
  return s;
}

const std::string kTrainText =
    "the cat sat on the mat. the cat's hat is flat; that cat sat on 12 mats, 123 hats.\n"
    "Über die Katze: sie saß auf der Matte. 日本語のテキストも少し。 don't stop, they're here\n";

Tokenizer trained(TokenizerKind kind, int64_t vocab) {
  BpeTrainOptions o;
  o.kind = kind;
  o.vocab_size = vocab;
  o.min_count = 1;
  return train_bpe({kTrainText, kTrainText}, o);
}

// GPT-2's bpe(): while some adjacent pair has a merge, take the lowest-ranked and merge all its occurrences.
std::vector<int32_t> gpt2_loop(std::vector<int32_t> w, const std::map<std::pair<int32_t, int32_t>, BpeMerge>& m) {
  while (w.size() > 1) {
    const BpeMerge* best = nullptr;
    std::pair<int32_t, int32_t> pair;
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      const auto it = m.find({w[i], w[i + 1]});
      if (it != m.end() && (!best || it->second.rank < best->rank)) best = &it->second, pair = it->first;
    }
    if (!best) break;
    std::vector<int32_t> out;
    for (size_t i = 0; i < w.size(); ++i) {
      if (i + 1 < w.size() && w[i] == pair.first && w[i + 1] == pair.second) {
        out.push_back(best->result);
        ++i;
      } else {
        out.push_back(w[i]);
      }
    }
    w = out;
  }
  return w;
}

}  // namespace

TEST_CASE("unicode classes: letters, numbers and white space of the generated tables") {
  CHECK(std::string(unicode_version()) == "15.0.0");
  CHECK(char_class('a') == CharClass::Letter);
  CHECK(char_class(0xE9) == CharClass::Letter);     // é
  CHECK(char_class(0x65E5) == CharClass::Letter);   // 日
  CHECK(char_class('7') == CharClass::Number);
  CHECK(char_class(0x2163) == CharClass::Number);   // Roman numeral four (Nl)
  CHECK(char_class(0xBD) == CharClass::Number);     // ½ (No)
  CHECK(char_class(0x3000) == CharClass::Space);    // ideographic space
  CHECK(char_class(0x85) == CharClass::Space);
  CHECK(char_class(0x1C) == CharClass::Other);      // a separator control, not White_Space
  CHECK(char_class('\'') == CharClass::Other);
  CHECK(char_class(0x1F600) == CharClass::Other);   // an emoji (So)
  CHECK(char_class(0x10FFFF) == CharClass::Other);
}

TEST_CASE("GPT-2 pre-tokenisation splits as the regular expression does") {
  using V = std::vector<std::string>;
  CHECK(pretokens("Hello world") == V{"Hello", " world"});
  CHECK(pretokens("don't I'M they're") == V{"don", "'t", " I", "'", "M", " they", "'re"});
  CHECK(pretokens("a  b") == V{"a", " ", " b"});
  CHECK(pretokens("a\n\nb") == V{"a", "\n", "\n", "b"});
  CHECK(pretokens("x  ") == V{"x", "  "});
  CHECK(pretokens("abc123 456") == V{"abc", "123", " 456"});
  CHECK(pretokens(" \xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac") == V{" \xc3\xa9t\xc3\xa9", " \xe6\x97\xa5\xe6\x9c\xac"});
  CHECK(pretokens("\xff\xfe x \xff") == V{"\xff\xfe", " x", " \xff"});
  CHECK(pretokens("?!'s") == V{"?!'", "s"});
  CHECK(pretokens("\t\xe3\x80\x80 x") == V{"\t\xe3\x80\x80", " x"});
  CHECK(pretokens("'ll'") == V{"'ll", "'"});
  CHECK(pretokens("  \n  y") == V{"  \n ", " y"});
  CHECK(pretokens("").empty());
}

TEST_CASE("GPT-2 pre-tokens cover any byte string exactly, in order") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const std::string s = trial % 2 ? random_bytes(rng, rng() % 64) : random_text(rng, rng() % 20);
    std::string joined;
    for (const std::string& p : pretokens(s)) {
      CHECK(!p.empty());
      joined += p;
    }
    CHECK(joined == s);
  }
}

TEST_CASE("GPT-2's byte alphabet: a bijection with printable characters, in GPT-2's order") {
  CHECK(gpt2_spell_bytes(" ") == "\xc4\xa0");   // Ġ
  CHECK(gpt2_spell_bytes("\n") == "\xc4\x8a");  // Ċ
  CHECK(gpt2_spell_bytes("A") == "A");
  CHECK(gpt2_byte_order(0) == '!');
  CHECK(gpt2_byte_order(93) == '~');
  CHECK(gpt2_byte_order(188) == 0);  // the first of the 68 remapped bytes
  std::set<uint32_t> points;
  std::set<int> order;
  for (int b = 0; b < 256; ++b) points.insert(gpt2_byte_to_code_point(uint8_t(b))), order.insert(gpt2_byte_order(b));
  CHECK(points.size() == 256);
  CHECK(order.size() == 256);
  std::mt19937 rng(5);
  const std::string bytes = random_bytes(rng, 1000);
  std::string back;
  REQUIRE(gpt2_unspell(gpt2_spell_bytes(bytes), back));
  CHECK(back == bytes);
  CHECK_FALSE(gpt2_unspell(" ", back));       // the space is spelt Ġ, never itself
  CHECK_FALSE(gpt2_unspell("\xff", back));    // not UTF-8
  CHECK_FALSE(gpt2_unspell("\xe2\x96\x81", back));  // ▁ is outside the alphabet
}

TEST_CASE("BPE merges: the heap gives GPT-2's loop's result on random merge tables") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    // Tokens 0..3 are letters; each merge makes a new token from two earlier ones, as trainers do.
    BpeMerges merges;
    std::map<std::pair<int32_t, int32_t>, BpeMerge> table;
    int32_t next = 4;
    for (int32_t rank = 0; rank < 12; ++rank) {
      const int32_t l = int32_t(rng() % uint32_t(next)), r = int32_t(rng() % uint32_t(next));
      if (table.count({l, r})) continue;
      table[{l, r}] = {rank, next};
      merges.add(l, r, rank, next++);
    }
    std::vector<int32_t> ids(rng() % 40);
    for (int32_t& id : ids) id = int32_t(rng() % 4);
    const std::vector<int32_t> expect = gpt2_loop(ids, table);
    merges.apply(ids);
    CHECK(ids == expect);
  }
}

TEST_CASE("tokenizers of both kinds give back any byte string, invalid UTF-8 included") {
  std::mt19937 rng(17);
  for (TokenizerKind kind : {TokenizerKind::ByteLevel, TokenizerKind::SentencePiece}) {
    Tokenizer tok = trained(kind, 420);
    CHECK(tok.merges().size() > 20);
    for (int trial = 0; trial < 300; ++trial) {
      const std::string s = trial % 3 == 0 ? random_bytes(rng, rng() % 200) : random_text(rng, rng() % 30);
      const std::vector<int32_t> ids = tok.encode(s);
      for (int32_t id : ids) CHECK(tok.type(id) != TokenType::Special);
      CHECK(tok.decode(ids) == s);
    }
    CHECK(tok.encode("").empty());
    CHECK(tok.decode(tok.encode(kTrainText)) == kTrainText);
    CHECK(tok.encode(kTrainText).size() < kTrainText.size() / 2);  // merges learnt from this very text apply
  }
}

TEST_CASE("special tokens: never made from text, added by id, left out of decoding unless asked") {
  Tokenizer gpt = trained(TokenizerKind::ByteLevel, 300);
  REQUIRE(gpt.bos() == gpt.vocab_size() - 1);
  CHECK(gpt.eos() == gpt.bos());
  CHECK(gpt.bytes(gpt.eos()) == "<|endoftext|>");
  const std::vector<int32_t> ids = gpt.encode("a<|endoftext|>b");
  CHECK(std::find(ids.begin(), ids.end(), gpt.eos()) == ids.end());
  std::vector<int32_t> with = {gpt.bos()};
  gpt.encode("hi", with);
  with.push_back(gpt.eos());
  CHECK(gpt.decode(with) == "hi");
  CHECK(gpt.decode(with, true) == "<|endoftext|>hi<|endoftext|>");

  Tokenizer sp = trained(TokenizerKind::SentencePiece, 400);
  CHECK(sp.bos() == 1);
  CHECK(sp.eos() == 2);
  std::vector<int32_t> s = {sp.bos()};
  sp.encode(" two  spaces ", s);
  CHECK(sp.decode(s) == " two  spaces ");
  CHECK(sp.decode(s, true) == "<s> two  spaces ");
}

TEST_CASE("SentencePiece-style encoding: a space first, ▁ and unseen characters as bytes") {
  Tokenizer sp = trained(TokenizerKind::SentencePiece, 400);
  // "ʘ" (U+0298) is not in the training text: its two bytes are byte tokens.
  const std::vector<int32_t> ids = sp.encode("\xca\x98");
  REQUIRE(ids.size() == 3);
  CHECK(sp.bytes(ids[0]) == " ");
  CHECK(ids[1] == sp.byte_id(0xCA));
  CHECK(ids[2] == sp.byte_id(0x98));
  CHECK(sp.type(ids[1]) == TokenType::Byte);
  // A literal ▁ is not a space: its bytes are kept.
  const std::vector<int32_t> lit = sp.encode("\xe2\x96\x81");
  CHECK(sp.decode(lit) == "\xe2\x96\x81");
  CHECK(lit.back() == sp.byte_id(0x81));
}

TEST_CASE("decoding an id outside the vocabulary is an error naming it") {
  Tokenizer tok = trained(TokenizerKind::ByteLevel, 300);
  CHECK_THROWS_WITH_AS(tok.decode({1, 300}), "tokenizer: cannot decode id 300: the vocabulary has ids 0..299", Error);
  CHECK_THROWS_WITH_AS(tok.decode({-1}), "tokenizer: cannot decode id -1: the vocabulary has ids 0..299", Error);
}

TEST_CASE("BPE trainer: counts, tie-breaking and the vocabulary layout, worked by hand") {
  BpeTrainOptions o;
  o.vocab_size = 256 + 2 + 1;
  // Words "ab", " ab", " ab": (a, b) is seen 3 times, then ( , ab) twice.
  Tokenizer t = train_bpe({"ab ab ab"}, o);
  REQUIRE(t.merges().size() == 2);
  CHECK(t.bytes(t.merges()[0].left) == "a");
  CHECK(t.bytes(t.merges()[0].right) == "b");
  CHECK(t.bytes(t.merges()[1].left) == " ");
  CHECK(t.bytes(t.merges()[1].right) == "ab");
  CHECK(t.bytes(256) == "ab");
  CHECK(t.bytes(257) == " ab");
  CHECK(t.type(258) == TokenType::Special);
  // "ab cd": three pairs seen once each; the tie goes to the smallest left bytes, the space.
  o.min_count = 1;
  o.vocab_size = 258;
  Tokenizer tie = train_bpe({"ab cd"}, o);
  REQUIRE(tie.merges().size() == 1);
  CHECK(tie.bytes(256) == " c");
  // min_count 2 stops before pairs seen once.
  o.min_count = 2;
  o.vocab_size = 300;
  CHECK(train_bpe({"ab cd"}, o).merges().empty());
  // SentencePiece layout: <unk> <s> </s>, 256 byte tokens, the alphabet by count (space first here).
  o.kind = TokenizerKind::SentencePiece;
  o.min_count = 1;
  o.vocab_size = 3 + 256 + 4 + 1;
  Tokenizer sp = train_bpe({"ab ab abc"}, o);
  CHECK(sp.bytes(0) == "<unk>");
  CHECK(sp.type(3) == TokenType::Byte);
  CHECK(sp.bytes(259) == " ");  // 3 spaces (one put in front) and 3 a, 3 b: ties to the lower code point
  CHECK(sp.bytes(260) == "a");
  CHECK(sp.bytes(261) == "b");
  CHECK(sp.bytes(262) == "c");
  CHECK(sp.bytes(263) == " a");
  CHECK_THROWS_WITH_AS(train_bpe({"x"}, BpeTrainOptions{TokenizerKind::ByteLevel, 200, 2, 1}),
                       "tokenizer train: a vocabulary of 200 is smaller than the 257 tokens the byte-level base needs",
                       Error);
}

TEST_CASE("text corpus with a tokenizer: the byte split, each split encoded alone, windows of tokens, target bytes") {
  Tokenizer tok = trained(TokenizerKind::ByteLevel, 400);
  std::string text;
  for (int i = 0; i < 20; ++i) text += kTrainText;
  test::TempDir dir;
  test::write_file(dir.file("c.txt"), std::vector<uint8_t>(text.begin(), text.end()));
  TextCorpus bytes(dir.file("c.txt"));
  TextCorpus tokens(dir.file("c.txt"), &tok);
  CHECK_FALSE(bytes.tokenized());
  CHECK(tokens.tokenized());
  CHECK(tokens.vocab() == tok.vocab_size());
  const TextSplitSizes b = text_split_sizes(int64_t(text.size()));
  CHECK(tokens.split_bytes(TextSplit::Valid) == b.valid);
  const std::string valid = text.substr(size_t(b.train), size_t(b.valid));
  CHECK(tokens.size(TextSplit::Valid) == int64_t(tok.encode(valid).size()));
  CHECK(tokens.size(TextSplit::Train) < bytes.size(TextSplit::Train) / 2);
  // Consecutive windows of the validation split: their targets are its tokens from the second on.
  const int64_t len = 8, n = tokens.num_windows(TextSplit::Valid, len);
  const LMBatch w = tokens.windows(TextSplit::Valid, 0, n, len);
  std::vector<int32_t> targets;
  for (int64_t i = 0; i < w.targets.numel(); ++i) targets.push_back(int32_t(w.targets.data<int64_t>()[i]));
  const std::vector<int32_t> all = tok.encode(valid);
  CHECK(targets == std::vector<int32_t>(all.begin() + 1, all.begin() + 1 + n * len));
  CHECK(tokens.target_bytes(w) == int64_t(tok.decode(targets).size()));
  CHECK(bytes.target_bytes(bytes.windows(TextSplit::Valid, 0, 2, len)) == 2 * len);
  CHECK_THROWS_WITH_AS(tokens.windows(TextSplit::Valid, 0, n + 1, len),
                       ("text: " + dir.file("c.txt") + ": windows [0, " + std::to_string(n + 1) + ") of 8 tokens are "
                        "outside the " + std::to_string(n) + " of the valid split").c_str(),
                       Error);
}
