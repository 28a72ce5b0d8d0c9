// Telling the tokenizer files apart, and the SentencePiece spelling of tokens shared by their readers.
#include <cstdio>

#include "datasets/tokenizer_io.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/json.h"

namespace eng {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void sentencepiece_piece_bytes(const std::string& piece, std::string& bytes, TokenType& type) {
  if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>' && hex_digit(piece[3]) >= 0 &&
      hex_digit(piece[4]) >= 0) {
    bytes.assign(1, char(hex_digit(piece[3]) * 16 + hex_digit(piece[4])));
    type = TokenType::Byte;
    return;
  }
  type = TokenType::Normal;
  bytes.clear();
  const std::string space = "\u2581";
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, space.size(), space) == 0) {
      bytes += ' ';
      i += space.size();
    } else {
      bytes += piece[i++];
    }
  }
}

std::string sentencepiece_piece(const Tokenizer& tok, int32_t id) {
  const std::string& b = tok.bytes(id);
  if (tok.type(id) == TokenType::Byte) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", unsigned(uint8_t(b[0])));
    return name;
  }
  if (tok.type(id) == TokenType::Special) return b;
  std::string piece;
  for (char c : b) piece += c == ' ' ? std::string("\u2581") : std::string(1, c);
  return piece;
}

Tokenizer load_tokenizer(const std::string& path) {
  const std::vector<uint8_t> file = read_file_bytes(path, "tokenizer");
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{') return parse_llama2c(file, "tokenizer.bin: " + path);
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Error& e) {
    fail("tokenizer: ", path, ": ", e.what());
  }
  if (root.find("model")) return parse_tokenizer_json(text, "tokenizer.json: " + path);
  // vocab.json's merges.txt; X_vocab.json's X_merges.txt.
  const std::string suffix = "vocab.json";
  const bool named = path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  const size_t slash = path.rfind('/');
  const std::string merges = named ? path.substr(0, path.size() - suffix.size()) + "merges.txt"
                                   : (slash == std::string::npos ? "" : path.substr(0, slash + 1)) + "merges.txt";
  return load_gpt2_files(path, merges);
}

}  // namespace eng
