#include "datasets/bpe_trainer.h"

#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>

#include "datasets/byte_unicode.h"
#include "datasets/pretokenize.h"
#include "engine/error.h"
#include "engine/json.h"

namespace eng {

namespace {

uint64_t pair_key(int32_t l, int32_t r) { return uint64_t(uint32_t(l)) << 32 | uint32_t(r); }

std::unordered_map<std::string, int64_t> count_words(const std::vector<std::string>& texts, TokenizerKind kind) {
  std::unordered_map<std::string, int64_t> counts;
  for (const std::string& text : texts) {
    if (kind == TokenizerKind::ByteLevel) {
      for_each_gpt2_pretoken(text, [&](std::string_view w) { ++counts[std::string(w)]; });
      continue;
    }
    if (text.empty()) continue;
    const std::string spaced = " " + text;
    for (size_t begin = 0; begin < spaced.size();) {
      size_t end = spaced.find(' ', begin + 1);
      if (end == std::string::npos) end = spaced.size();
      ++counts[spaced.substr(begin, end - begin)];
      begin = end;
    }
  }
  return counts;
}

// The SentencePiece alphabet: characters by decreasing count (then code point, which is UTF-8 byte order) until
// they cover `coverage` of all occurrences, and the space.
std::vector<std::string> alphabet(const std::unordered_map<std::string, int64_t>& words, double coverage) {
  std::map<std::string, int64_t> chars;
  int64_t total = 0;
  for (const auto& [w, n] : words)
    for (size_t i = 0; i < w.size();) {
      const size_t len = utf8_seq_len(w, i);
      if (len == 0) {
        ++i;
        continue;
      }
      chars[w.substr(i, len)] += n;
      total += n;
      i += len;
    }
  std::vector<std::pair<std::string, int64_t>> sorted(chars.begin(), chars.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> out;
  int64_t covered = 0;
  for (const auto& [c, n] : sorted) {
    if (double(covered) >= coverage * double(total)) break;
    out.push_back(c);
    covered += n;
  }
  if (std::find(out.begin(), out.end(), " ") == out.end()) out.push_back(" ");
  return out;
}

class Trainer {
 public:
  Trainer(const BpeTrainOptions& o, const std::vector<std::string>& texts) : o_(o) {
    const auto counts = count_words(texts, o.kind);
    if (o.kind == TokenizerKind::ByteLevel) {
      for (int i = 0; i < 256; ++i) add_token(std::string(1, char(gpt2_byte_order(i))), TokenType::Normal);
    } else {
      for (const char* s : {"<unk>", "<s>", "</s>"}) add_token(s, TokenType::Special);
      for (int b = 0; b < 256; ++b) add_token(std::string(1, char(b)), TokenType::Byte);
      for (const std::string& c : alphabet(counts, o.char_coverage)) add_token(c, TokenType::Normal);
    }
    const int64_t specials_after = o.kind == TokenizerKind::ByteLevel ? 1 : 0;
    ENG_CHECK(o.vocab_size >= int64_t(bytes_.size()) + specials_after, "tokenizer train: a vocabulary of ",
              o.vocab_size, " is smaller than the ", int64_t(bytes_.size()) + specials_after, " tokens the ",
              tokenizer_kind_name(o.kind), " base needs");
    target_ = o.vocab_size - specials_after;
    // Sorted words: the same corpus gives the same word indices, whatever the hash map's order.
    std::map<std::string, int64_t> ordered(counts.begin(), counts.end());
    for (const auto& [w, n] : ordered) add_word(w, n);
  }

  Tokenizer run() {
    for (const auto& [key, n] : pair_count_) push(key, n);
    while (int64_t(bytes_.size()) < target_) {
      const auto best = pop_best();
      if (!best) break;
      merge(*best);
    }
    if (o_.kind == TokenizerKind::ByteLevel) add_token("<|endoftext|>", TokenType::Special);
    return Tokenizer(o_.kind, std::move(bytes_), std::move(types_), std::move(merges_), "tokenizer train");
  }

 private:
  struct Entry {
    int64_t count;
    uint64_t key;
  };

  int32_t add_token(const std::string& b, TokenType t) {
    bytes_.push_back(b);
    types_.push_back(t);
    if (t == TokenType::Normal) normal_.emplace(b, int32_t(bytes_.size() - 1));
    return int32_t(bytes_.size() - 1);
  }

  void add_word(const std::string& w, int64_t n) {
    std::vector<int32_t> syms;
    for (size_t i = 0; i < w.size();) {
      const size_t len = o_.kind == TokenizerKind::ByteLevel ? 1 : utf8_seq_len(w, i);
      const auto it = len > 0 ? normal_.find(w.substr(i, len)) : normal_.end();
      if (it != normal_.end()) {
        syms.push_back(it->second);
      } else {  // SentencePiece: outside the alphabet, byte tokens (3 + byte)
        for (size_t k = 0; k < std::max<size_t>(len, 1); ++k) syms.push_back(3 + int32_t(uint8_t(w[i + k])));
      }
      i += std::max<size_t>(len, 1);
    }
    words_.push_back(std::move(syms));
    word_count_.push_back(n);
    count_pairs(int32_t(words_.size() - 1), +1);
  }

  // Adds (sign +1) or removes (-1) the pairs of word w, noting each in touched_.
  void count_pairs(int32_t w, int sign) {
    const std::vector<int32_t>& s = words_[size_t(w)];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      if (types_[size_t(s[i])] != TokenType::Normal || types_[size_t(s[i + 1])] != TokenType::Normal) continue;
      const uint64_t key = pair_key(s[i], s[i + 1]);
      pair_count_[key] += sign * word_count_[size_t(w)];
      if (sign > 0) pair_words_[key].push_back(w);
      touched_.push_back(key);
    }
  }

  bool worse(const Entry& a, const Entry& b) const {
    if (a.count != b.count) return a.count < b.count;
    const std::string &al = bytes_[a.key >> 32], &bl = bytes_[b.key >> 32];
    if (al != bl) return al > bl;
    return bytes_[uint32_t(a.key)] > bytes_[uint32_t(b.key)];
  }

  void push(uint64_t key, int64_t n) {
    heap_.push_back({n, key});
    std::push_heap(heap_.begin(), heap_.end(), [this](const Entry& a, const Entry& b) { return worse(a, b); });
  }

  std::optional<uint64_t> pop_best() {
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), [this](const Entry& a, const Entry& b) { return worse(a, b); });
      const Entry e = heap_.back();
      heap_.pop_back();
      const auto it = pair_count_.find(e.key);
      if (it == pair_count_.end() || it->second != e.count) continue;  // stale
      if (e.count < o_.min_count) return std::nullopt;
      return e.key;
    }
    return std::nullopt;
  }

  void merge(uint64_t key) {
    const int32_t l = int32_t(key >> 32), r = int32_t(uint32_t(key));
    const std::string joined = bytes_[size_t(l)] + bytes_[size_t(r)];
    const auto found = normal_.find(joined);
    const int32_t t = found != normal_.end() ? found->second : add_token(joined, TokenType::Normal);
    merges_.push_back({l, r, int32_t(merges_.size())});
    std::vector<int32_t> holders = std::move(pair_words_[key]);
    pair_words_.erase(key);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    touched_.clear();
    for (int32_t w : holders) {
      std::vector<int32_t>& s = words_[size_t(w)];
      bool holds = false;
      for (size_t i = 0; i + 1 < s.size() && !holds; ++i) holds = s[i] == l && s[i + 1] == r;
      if (!holds) continue;  // the pair left this word in an earlier merge
      count_pairs(w, -1);
      std::vector<int32_t> merged;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == l && s[i + 1] == r) {
          merged.push_back(t);
          ++i;
        } else {
          merged.push_back(s[i]);
        }
      }
      s = std::move(merged);
      count_pairs(w, +1);
    }
    pair_count_.erase(key);
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (uint64_t k : touched_) {
      const auto it = pair_count_.find(k);
      if (it == pair_count_.end()) continue;
      if (it->second <= 0) {
        pair_count_.erase(it);
      } else {
        push(k, it->second);
      }
    }
  }

  BpeTrainOptions o_;
  int64_t target_ = 0;
  std::vector<std::string> bytes_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string, int32_t> normal_;
  std::vector<Tokenizer::Merge> merges_;
  std::vector<std::vector<int32_t>> words_;
  std::vector<int64_t> word_count_;
  std::unordered_map<uint64_t, int64_t> pair_count_;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words_;
  std::vector<Entry> heap_;
  std::vector<uint64_t> touched_;
};

}  // namespace

Tokenizer train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& options) {
  return Trainer(options, texts).run();
}

}  // namespace eng
