// GPT-2's vocab.json ({token: id}) and merges.txt ("#version: 0.2", then "left right" per line).
#include "datasets/byte_unicode.h"
#include "datasets/tokenizer_io.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/json.h"
#include "engine/safe_text.h"

namespace eng {

namespace {

// GPT-2's vocab.json lists its one special token among the others.
constexpr const char* kEndOfText = "<|endoftext|>";

std::string read_text(const std::string& path, const std::string& who) {
  const std::vector<uint8_t> b = read_file_bytes(path, who);
  return std::string(b.begin(), b.end());
}

}  // namespace

Tokenizer parse_gpt2_files(std::string_view vocab_json, std::string_view merges_txt, const std::string& who) {
  Json vocab;
  try {
    vocab = Json::parse(vocab_json);
  } catch (const Error& e) {
    fail(who, ": vocab.json: ", e.what());
  }
  ENG_CHECK(vocab.is_object(), who, ": vocab.json is ", json_type_name(vocab.type()), ", not an object of ids");
  const size_t n = vocab.as_object().size();
  std::vector<std::string> bytes(n);
  std::vector<TokenType> types(n, TokenType::Normal);
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int32_t> id_of;
  for (const auto& [piece, id] : vocab.as_object()) {
    ENG_CHECK(id.is_int() && id.as_int() >= 0 && id.as_int() < int64_t(n) && !seen[size_t(id.as_int())], who,
              ": vocab.json: the id of \"", terminal_text(piece), "\" is not a distinct integer in 0..", n - 1);
    const size_t i = size_t(id.as_int());
    seen[i] = true;
    id_of.emplace(piece, int32_t(i));
    if (piece == kEndOfText) {
      bytes[i] = piece, types[i] = TokenType::Special;
      continue;
    }
    ENG_CHECK(gpt2_unspell(piece, bytes[i]), who, ": vocab.json: token ", i, " \"", terminal_text(piece),
              "\" is not spelt in GPT-2's byte alphabet");
  }
  std::vector<Tokenizer::Merge> merges;
  size_t line_no = 0;
  for (size_t pos = 0; pos < merges_txt.size();) {
    size_t end = merges_txt.find('\n', pos);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string line(merges_txt.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    ENG_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                  line.find(' ', space + 1) == std::string::npos,
              who, ": merges.txt line ", line_no, " \"", terminal_text(line), "\" is not two tokens separated by one space");
    const auto l = id_of.find(line.substr(0, space)), r = id_of.find(line.substr(space + 1));
    ENG_CHECK(l != id_of.end() && r != id_of.end(), who, ": merges.txt line ", line_no, " \"", terminal_text(line),
              "\" names a token that vocab.json does not hold");
    merges.push_back({l->second, r->second, int32_t(merges.size())});
  }
  return Tokenizer(TokenizerKind::ByteLevel, std::move(bytes), std::move(types), std::move(merges), who);
}

Tokenizer load_gpt2_files(const std::string& vocab_path, const std::string& merges_path) {
  return parse_gpt2_files(read_text(vocab_path, "tokenizer"), read_text(merges_path, "tokenizer"),
                          "tokenizer: " + vocab_path + " + " + merges_path);
}

void save_gpt2_files(const Tokenizer& tok, const std::string& vocab_path, const std::string& merges_path) {
  ENG_CHECK(tok.kind() == TokenizerKind::ByteLevel, "tokenizer: vocab.json + merges.txt hold byte-level BPE only; this "
            "tokenizer is ", tokenizer_kind_name(tok.kind()));
  const auto piece = [&](int32_t id) {
    return tok.type(id) == TokenType::Special ? tok.bytes(id) : gpt2_spell_bytes(tok.bytes(id));
  };
  Json::Object vocab;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) vocab.emplace_back(piece(id), Json(id));
  const std::string vocab_text = Json::object(std::move(vocab)).dump();
  std::string merges = "#version: 0.2\n";
  for (const Tokenizer::Merge& m : tok.merges()) merges += piece(m.left) + " " + piece(m.right) + "\n";
  write_file_atomic(vocab_path, std::vector<uint8_t>(vocab_text.begin(), vocab_text.end()), "tokenizer");
  write_file_atomic(merges_path, std::vector<uint8_t>(merges.begin(), merges.end()), "tokenizer");
}

}  // namespace eng
