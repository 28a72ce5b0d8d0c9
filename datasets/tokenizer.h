// A BPE tokenizer: text (any bytes) -> token ids -> the same bytes. Two kinds, as real models ship them
// (docs/tokenizers.md is the specification):
//  - ByteLevel (GPT-2): text is cut into pre-tokens by GPT-2's rule (datasets/pretokenize.h), each pre-token's
//    bytes start as the 256 single-byte tokens and are merged (datasets/bpe.h). Every byte string encodes.
//  - SentencePiece (LLaMA's tokenizer.json, llama2.c's tokenizer.bin): a space is put before non-empty text and the
//    whole text is one sequence of characters (the spaces spelt "▁" in files), each a token of its own or, if the
//    vocabulary lacks it, its UTF-8 bytes as byte tokens <0xNN> (byte fallback); then merges. A byte that starts
//    no well-formed UTF-8 sequence, and a literal "▁" in the text, take byte tokens too, so decoding gives back
//    exactly the bytes encoded. Decoding drops the one space encoding put first.
// Special tokens (BOS, EOS, <unk>, <|endoftext|>) are never produced from text: the caller adds them by id, so text
// that spells "<|endoftext|>" is encoded as text. Decoding leaves them out unless asked.
//
// A Tokenizer is built from its parts, checked: every merge joins two tokens into the token spelt by their bytes
// together; a ByteLevel vocabulary holds all 256 single bytes, a SentencePiece one all 256 byte tokens. encode() keeps
// a cache of the words it has merged (ByteLevel), so one Tokenizer serves one thread.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "datasets/bpe.h"

namespace eng {

enum class TokenizerKind { ByteLevel, SentencePiece };
const char* tokenizer_kind_name(TokenizerKind k);  // "byte-level", "sentencepiece"

enum class TokenType : uint8_t {
  Normal,   // stands for its bytes
  Byte,     // SentencePiece byte fallback <0xNN>: one byte
  Special,  // never produced from text; its bytes are its name ("<s>")
};

class Tokenizer {
 public:
  struct Merge {
    int32_t left, right, rank;
  };
  // `bytes[i]` and `types[i]` describe token i; merges are listed in increasing rank (ranks may repeat: llama2.c's
  // scores tie). `who` starts every error ("tokenizer.json: tok.json"). BOS and EOS are found among the special
  // tokens by name (<s>, <|begin_of_text|>, <bos>, <|endoftext|>; </s>, <|end_of_text|>, <eos>, <|endoftext|>)
  // unless given.
  Tokenizer(TokenizerKind kind, std::vector<std::string> bytes, std::vector<TokenType> types,
            std::vector<Merge> merges, const std::string& who, int32_t bos = -1, int32_t eos = -1);

  TokenizerKind kind() const { return kind_; }
  int64_t vocab_size() const { return int64_t(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  TokenType type(int32_t id) const { return types_[size_t(id)]; }
  const std::vector<Merge>& merges() const { return merge_list_; }
  int32_t bos() const { return bos_; }  // -1: none
  int32_t eos() const { return eos_; }
  // The id of the byte token for `b` (ByteLevel: the single-byte token).
  int32_t byte_id(uint8_t b) const { return byte_ids_[b]; }

  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<int32_t>& out);
  std::vector<int32_t> encode(std::string_view text) {
    std::vector<int32_t> out;
    encode(text, out);
    return out;
  }
  // An id outside the vocabulary throws, naming it.
  std::string decode(const std::vector<int32_t>& ids, bool with_specials = false) const;

 private:
  void encode_word(std::string_view word, std::vector<int32_t>& out);
  void encode_sentencepiece(std::string_view text, std::vector<int32_t>& out) const;
  void check_and_index(const std::string& who);

  TokenizerKind kind_;
  std::vector<std::string> bytes_;
  std::vector<TokenType> types_;
  std::vector<Merge> merge_list_;
  BpeMerges merges_;
  std::unordered_map<std::string, int32_t> normal_ids_;  // bytes -> Normal token
  std::array<int32_t, 256> byte_ids_{};
  int32_t bos_ = -1, eos_ = -1;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;  // ByteLevel words already merged
  std::string key_;                                               // the word being looked up
};

}  // namespace eng
