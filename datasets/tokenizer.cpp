#include "datasets/tokenizer.h"

#include <limits>

#include "datasets/pretokenize.h"
#include "engine/error.h"
#include "engine/json.h"
#include "engine/safe_text.h"

namespace eng {

namespace {

// Words longer than this are merged every time rather than cached: long runs are rare and would fill the cache.
constexpr size_t kMaxCachedWord = 64;
constexpr size_t kMaxCacheEntries = size_t(1) << 18;

std::string quoted(const std::string& bytes) { return "\"" + terminal_text(bytes) + "\""; }

int32_t find_special(const std::vector<std::string>& bytes, const std::vector<TokenType>& types,
                     std::initializer_list<const char*> names) {
  for (const char* name : names)
    for (size_t i = 0; i < bytes.size(); ++i)
      if (types[i] == TokenType::Special && bytes[i] == name) return int32_t(i);
  return -1;
}

}  // namespace

const char* tokenizer_kind_name(TokenizerKind k) {
  return k == TokenizerKind::ByteLevel ? "byte-level" : "sentencepiece";
}

Tokenizer::Tokenizer(TokenizerKind kind, std::vector<std::string> bytes, std::vector<TokenType> types,
                     std::vector<Merge> merges, const std::string& who, int32_t bos, int32_t eos)
    : kind_(kind), bytes_(std::move(bytes)), types_(std::move(types)), merge_list_(std::move(merges)) {
  check_and_index(who);
  bos_ = bos >= 0 ? bos : find_special(bytes_, types_, {"<s>", "<|begin_of_text|>", "<bos>", "<|endoftext|>"});
  eos_ = eos >= 0 ? eos : find_special(bytes_, types_, {"</s>", "<|end_of_text|>", "<eos>", "<|endoftext|>"});
  ENG_CHECK(bos_ < vocab_size() && eos_ < vocab_size(), who, ": BOS ", bos_, " or EOS ", eos_,
            " is outside the vocabulary of ", vocab_size());
}

void Tokenizer::check_and_index(const std::string& who) {
  ENG_CHECK(!bytes_.empty() && bytes_.size() == types_.size(), who, ": ", bytes_.size(), " tokens but ", types_.size(),
            " token types");
  ENG_CHECK(bytes_.size() <= size_t(std::numeric_limits<int32_t>::max()), who, ": ", bytes_.size(),
            " tokens are more than ids of 32 bits can number");
  byte_ids_.fill(-1);
  for (size_t i = 0; i < bytes_.size(); ++i) {
    const std::string& b = bytes_[i];
    if (types_[i] == TokenType::Special) continue;
    ENG_CHECK(!b.empty(), who, ": token ", i, " stands for no bytes");
    if (types_[i] == TokenType::Byte) {
      ENG_CHECK(kind_ == TokenizerKind::SentencePiece && b.size() == 1, who, ": token ", i,
                " is a byte token but the tokenizer is ", tokenizer_kind_name(kind_), " or it is not one byte");
      ENG_CHECK(byte_ids_[uint8_t(b[0])] < 0, who, ": tokens ", byte_ids_[uint8_t(b[0])], " and ", i,
                " are both the byte token of ", int(uint8_t(b[0])));
      byte_ids_[uint8_t(b[0])] = int32_t(i);
      continue;
    }
    const auto [it, fresh] = normal_ids_.emplace(b, int32_t(i));
    ENG_CHECK(fresh, who, ": tokens ", it->second, " and ", i, " both stand for ", quoted(b));
    if (kind_ == TokenizerKind::ByteLevel && b.size() == 1) byte_ids_[uint8_t(b[0])] = int32_t(i);
  }
  for (int b = 0; b < 256; ++b)
    ENG_CHECK(byte_ids_[size_t(b)] >= 0, who, ": the vocabulary has no ",
              kind_ == TokenizerKind::ByteLevel ? "token for the single byte " : "byte token for ", b,
              kind_ == TokenizerKind::ByteLevel ? " (byte-level BPE needs all 256)" : " (byte fallback needs all 256)");
  int32_t last_rank = 0;
  for (size_t m = 0; m < merge_list_.size(); ++m) {
    const Merge& g = merge_list_[m];
    for (int32_t id : {g.left, g.right})
      ENG_CHECK(id >= 0 && id < vocab_size() && types_[size_t(id)] != TokenType::Special, who, ": merge ", m,
                " uses token ", id, ", which is not an ordinary token of the vocabulary");
    ENG_CHECK(g.rank >= last_rank, who, ": merge ", m, " has rank ", g.rank, " after rank ", last_rank);
    last_rank = g.rank;
    const std::string joined = bytes_[size_t(g.left)] + bytes_[size_t(g.right)];
    const auto it = normal_ids_.find(joined);
    ENG_CHECK(it != normal_ids_.end(), who, ": merge ", m, " (", quoted(bytes_[size_t(g.left)]), " + ",
              quoted(bytes_[size_t(g.right)]), ") makes ", quoted(joined), ", which is not in the vocabulary");
    merges_.add(g.left, g.right, g.rank, it->second);
  }
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  if (kind_ == TokenizerKind::SentencePiece) return encode_sentencepiece(text, out);
  for_each_gpt2_pretoken(text, [&](std::string_view word) { encode_word(word, out); });
}

void Tokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) {
  const bool cacheable = word.size() <= kMaxCachedWord;
  if (cacheable) {
    key_.assign(word.data(), word.size());  // reused: no allocation per lookup
    const auto it = cache_.find(key_);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids(word.size());
  for (size_t i = 0; i < word.size(); ++i) ids[i] = byte_ids_[uint8_t(word[i])];
  merges_.apply(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (!cacheable) return;
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(word), std::move(ids));
}

void Tokenizer::encode_sentencepiece(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const std::string spaced = " " + std::string(text);
  std::vector<int32_t> ids;
  ids.reserve(spaced.size());
  for (size_t i = 0; i < spaced.size();) {
    const size_t len = utf8_seq_len(spaced, i);
    if (len > 0) {
      const auto it = normal_ids_.find(spaced.substr(i, len));
      if (it != normal_ids_.end()) {
        ids.push_back(it->second);
        i += len;
        continue;
      }
    }
    for (size_t k = 0; k < std::max<size_t>(len, 1); ++k) ids.push_back(byte_ids_[uint8_t(spaced[i + k])]);
    i += std::max<size_t>(len, 1);
  }
  merges_.apply(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool with_specials) const {
  std::string text;
  bool first_text = true;
  for (int32_t id : ids) {
    ENG_CHECK(id >= 0 && id < vocab_size(), "tokenizer: cannot decode id ", id, ": the vocabulary has ids 0..",
              vocab_size() - 1);
    if (types_[size_t(id)] == TokenType::Special) {
      if (with_specials) text += bytes_[size_t(id)];
      continue;
    }
    const std::string& b = bytes_[size_t(id)];
    // SentencePiece: the space that encoding put before the text.
    const bool drop_space = first_text && kind_ == TokenizerKind::SentencePiece && b[0] == ' ';
    text.append(b, drop_space ? 1 : 0, std::string::npos);
    first_text = false;
  }
  return text;
}

}  // namespace eng
