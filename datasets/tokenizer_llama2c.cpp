// llama2.c's tokenizer.bin. Its encoder merges any adjacent pair whose bytes together are a token, the pair making
// the highest-scored token first (the leftmost of equal scores), so reading it turns scores into merges: every way
// to cut each token into two tokens is a merge, ranked by the token's score (equal scores, equal ranks).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "datasets/tokenizer_io.h"
#include "engine/error.h"
#include "engine/file_io.h"

namespace eng {

namespace {

// llama2.c's fixed ids.
constexpr int32_t kUnk = 0, kBos = 1, kEos = 2;

template <class T>
T read_le(const std::vector<uint8_t>& file, size_t& pos) {
  T v;
  std::memcpy(&v, file.data() + pos, sizeof v);  // little-endian hosts only, as llama2.c itself
  pos += sizeof v;
  return v;
}

template <class T>
void append_le(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

}  // namespace

Tokenizer parse_llama2c(const std::vector<uint8_t>& file, const std::string& who) {
  ENG_CHECK(file.size() >= 4, who, ": ", file.size(), " bytes, too short for the int32 max_token_length");
  size_t pos = 0;
  const int32_t max_len = read_le<int32_t>(file, pos);
  ENG_CHECK(max_len >= 1, who, ": max_token_length is ", max_len, ", not positive");
  std::vector<std::string> bytes;
  std::vector<TokenType> types;
  std::vector<float> scores;
  while (pos < file.size()) {
    const size_t id = bytes.size();
    ENG_CHECK(file.size() - pos >= 8, who, ": token ", id, " at byte ", pos, " is cut short (", file.size() - pos,
              " bytes left, a token needs a float32 score and an int32 length)");
    const float score = read_le<float>(file, pos);
    const int32_t len = read_le<int32_t>(file, pos);
    ENG_CHECK(std::isfinite(score), who, ": token ", id, " has score ", score);
    ENG_CHECK(len >= 0 && len <= max_len, who, ": token ", id, " has length ", len, ", outside 0..", max_len,
              " (max_token_length)");
    ENG_CHECK(file.size() - pos >= size_t(len), who, ": token ", id, " needs ", len, " bytes, the file has ",
              file.size() - pos, " left");
    const std::string piece(reinterpret_cast<const char*>(file.data() + pos), size_t(len));
    pos += size_t(len);
    std::string b;
    TokenType t;
    sentencepiece_piece_bytes(piece, b, t);
    if (int32_t(id) <= kEos) b = piece, t = TokenType::Special;
    bytes.push_back(std::move(b));
    types.push_back(t);
    scores.push_back(score);
  }
  ENG_CHECK(bytes.size() > size_t(kEos), who, ": ", bytes.size(), " tokens; llama2.c's ids 0, 1, 2 are <unk>, BOS and "
            "EOS, so a vocabulary needs more");
  std::map<std::string, int32_t> normal;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (types[i] == TokenType::Normal) normal.emplace(bytes[i], int32_t(i));
  // Ranks: distinct scores in decreasing order.
  std::vector<float> distinct(scores);
  std::sort(distinct.begin(), distinct.end(), std::greater<float>());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<Tokenizer::Merge> merges;
  for (const auto& [b, id] : normal) {
    const int32_t rank =
        int32_t(std::lower_bound(distinct.begin(), distinct.end(), scores[size_t(id)], std::greater<float>()) -
                distinct.begin());
    for (size_t cut = 1; cut < b.size(); ++cut) {
      const auto l = normal.find(b.substr(0, cut)), r = normal.find(b.substr(cut));
      if (l != normal.end() && r != normal.end()) merges.push_back({l->second, r->second, rank});
    }
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Tokenizer::Merge& a, const Tokenizer::Merge& b) { return a.rank < b.rank; });
  return Tokenizer(TokenizerKind::SentencePiece, std::move(bytes), std::move(types), std::move(merges), who, kBos, kEos);
}

std::vector<uint8_t> llama2c_bytes(const Tokenizer& tok) {
  ENG_CHECK(tok.kind() == TokenizerKind::SentencePiece, "tokenizer: tokenizer.bin holds SentencePiece-style BPE only; "
            "this tokenizer is ", tokenizer_kind_name(tok.kind()));
  ENG_CHECK(tok.vocab_size() > kEos && tok.type(kUnk) == TokenType::Special && tok.bos() == kBos && tok.eos() == kEos,
            "tokenizer: tokenizer.bin fixes ids 0, 1, 2 as <unk>, BOS, EOS; this tokenizer's specials are elsewhere");
  // A token made by merges scores minus the rank of its first merge, so that llama2.c merges in rank order; the
  // others score below every merge.
  const float never = -float(tok.merges().empty() ? 1 : tok.merges().back().rank + 1);
  std::vector<float> score(size_t(tok.vocab_size()), never);
  std::map<std::string, int32_t> normal;
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (tok.type(id) == TokenType::Normal) normal.emplace(tok.bytes(id), id);
  for (auto it = tok.merges().rbegin(); it != tok.merges().rend(); ++it)
    score[size_t(normal.at(tok.bytes(it->left) + tok.bytes(it->right)))] = -float(it->rank);
  std::vector<std::string> pieces;
  int32_t max_len = 1;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    pieces.push_back(tok.type(id) == TokenType::Byte ? sentencepiece_piece(tok, id) : tok.bytes(id));
    max_len = std::max(max_len, int32_t(pieces.back().size()));
  }
  std::vector<uint8_t> out;
  append_le(out, max_len);
  for (size_t id = 0; id < pieces.size(); ++id) {
    append_le(out, score[id]);
    append_le(out, int32_t(pieces[id].size()));
    out.insert(out.end(), pieces[id].begin(), pieces[id].end());
  }
  return out;
}

void save_llama2c(const Tokenizer& tok, const std::string& path) { write_file_atomic(path, llama2c_bytes(tok), "tokenizer"); }

}  // namespace eng
