// Tokenizer files (docs/tokenizers.md gives each format in full):
//  - tokenizer.json (Hugging Face's): a BPE model with a ByteLevel pre-tokenizer (GPT-2), or with byte_fallback and
//    "▁" for spaces (LLaMA). added_tokens become special tokens.
//  - vocab.json + merges.txt: GPT-2's two files, tokens spelt in its byte alphabet (datasets/byte_unicode.h).
//  - tokenizer.bin (llama2.c): int32 max_token_length, then per token float32 score, int32 length, its bytes;
//    little-endian. Its merges are implicit: any two adjacent tokens whose bytes together are a token merge, the
//    one of highest score first; ids 0, 1, 2 are <unk>, BOS, EOS.
// Readers check everything and throw eng::Error naming the file and what is wrong; writers are atomic.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/tokenizer.h"

namespace eng {

// Any of the three, told apart by content: a JSON object with a "model" is a tokenizer.json, one of ids a
// vocab.json (merges.txt is read from beside it; for X_vocab.json, X_merges.txt), anything else a tokenizer.bin.
Tokenizer load_tokenizer(const std::string& path);

Tokenizer parse_tokenizer_json(std::string_view text, const std::string& who);
std::string tokenizer_json(const Tokenizer& tok);
void save_tokenizer_json(const Tokenizer& tok, const std::string& path);

Tokenizer parse_gpt2_files(std::string_view vocab_json, std::string_view merges_txt, const std::string& who);
Tokenizer load_gpt2_files(const std::string& vocab_path, const std::string& merges_path);
void save_gpt2_files(const Tokenizer& tok, const std::string& vocab_path, const std::string& merges_path);

Tokenizer parse_llama2c(const std::vector<uint8_t>& file, const std::string& who);
std::vector<uint8_t> llama2c_bytes(const Tokenizer& tok);
void save_llama2c(const Tokenizer& tok, const std::string& path);

// Shared by the readers: a SentencePiece piece -> its bytes and type ("<0x0A>" is the byte token of 10, "▁" a
// space), and back.
void sentencepiece_piece_bytes(const std::string& piece, std::string& bytes, TokenType& type);
std::string sentencepiece_piece(const Tokenizer& tok, int32_t id);

}  // namespace eng
