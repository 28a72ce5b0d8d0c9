// tokenizer.json: reading both shapes, writing the shape of each kind as Hugging Face's tokenizers writes it.
#include <map>

#include "datasets/byte_unicode.h"
#include "datasets/tokenizer_io.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/json.h"
#include "engine/safe_text.h"

namespace eng {

namespace {

const Json& member(const Json& obj, const char* key, const std::string& who) {
  ENG_CHECK(obj.is_object(), who, ": expected an object holding \"", key, "\"");
  const Json* v = obj.find(key);
  ENG_CHECK(v, who, ": \"", key, "\" is missing");
  return *v;
}

std::string type_of(const Json* component) {
  if (!component || component->is_null()) return "";
  const Json* t = component->is_object() ? component->find("type") : nullptr;
  return t && t->is_string() ? t->as_string() : "?";
}

TokenizerKind kind_of(const Json& root, const Json& model, const std::string& who) {
  const std::string pre = type_of(root.find("pre_tokenizer"));
  if (pre == "ByteLevel") {
    const Json& p = *root.find("pre_tokenizer");
    const Json* prefix = p.find("add_prefix_space");
    const Json* regex = p.find("use_regex");
    ENG_CHECK(!(prefix && prefix->is_bool() && prefix->as_bool()), who,
              ": a ByteLevel pre-tokenizer with add_prefix_space true is not supported (GPT-2's is false)");
    ENG_CHECK(!(regex && regex->is_bool() && !regex->as_bool()), who,
              ": a ByteLevel pre-tokenizer with use_regex false is not supported (GPT-2's rule is the one read)");
    return TokenizerKind::ByteLevel;
  }
  const Json* fallback = model.find("byte_fallback");
  ENG_CHECK(fallback && fallback->is_bool() && fallback->as_bool() && (pre.empty() || pre == "Metaspace"), who,
            ": neither GPT-2's byte-level BPE (pre_tokenizer ByteLevel) nor SentencePiece-style BPE (byte_fallback true, "
            "no pre-tokenizer or Metaspace); pre_tokenizer is ", pre.empty() ? "null" : "\"" + pre + "\"",
            ", which is not supported");
  return TokenizerKind::SentencePiece;
}

std::pair<std::string, std::string> merge_pair(const Json& m, size_t index, const std::string& who) {
  if (m.is_array()) {
    const Json::Array& a = m.as_array();
    ENG_CHECK(a.size() == 2 && a[0].is_string() && a[1].is_string(), who, ": merge ", index,
              " is not a pair of strings");
    return {a[0].as_string(), a[1].as_string()};
  }
  ENG_CHECK(m.is_string(), who, ": merge ", index, " is ", json_type_name(m.type()), ", not \"left right\"");
  const std::string& s = m.as_string();
  const size_t space = s.find(' ');
  ENG_CHECK(space != std::string::npos && space > 0 && space + 1 < s.size() && s.find(' ', space + 1) == std::string::npos,
            who, ": merge ", index, " \"", terminal_text(s), "\" is not two tokens separated by one space");
  return {s.substr(0, space), s.substr(space + 1)};
}

}  // namespace

Tokenizer parse_tokenizer_json(std::string_view text, const std::string& who) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Error& e) {
    fail(who, ": ", e.what());
  }
  const Json& model = member(root, "model", who);
  ENG_CHECK(type_of(&model) == "BPE", who, ": the model is \"", terminal_text(type_of(&model)),
            "\"; only BPE is supported");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* a = model.find(affix);
    ENG_CHECK(!a || a->is_null() || (a->is_string() && a->as_string().empty()), who, ": ", affix,
              " is not supported");
  }
  const TokenizerKind kind = kind_of(root, model, who);
  const Json& vocab = member(model, "vocab", who);
  ENG_CHECK(vocab.is_object(), who, ": model.vocab is ", json_type_name(vocab.type()), ", not an object");
  std::map<int64_t, std::string> pieces;  // id -> piece
  for (const auto& [piece, id] : vocab.as_object()) {
    ENG_CHECK(id.is_int() && id.as_int() >= 0 && id.as_int() < (int64_t(1) << 31), who, ": the id of token \"",
              terminal_text(piece), "\" is not an integer in 0..2^31-1");
    ENG_CHECK(pieces.emplace(id.as_int(), piece).second, who, ": tokens \"", terminal_text(pieces[id.as_int()]),
              "\" and \"", terminal_text(piece), "\" share id ", id.as_int());
  }
  std::map<int64_t, std::string> specials;
  if (const Json* added = root.find("added_tokens"); added && !added->is_null()) {
    ENG_CHECK(added->is_array(), who, ": added_tokens is not an array");
    for (const Json& t : added->as_array()) {
      const Json& id = member(t, "id", who);
      const Json& content = member(t, "content", who);
      ENG_CHECK(id.is_int() && id.as_int() >= 0 && id.as_int() < (int64_t(1) << 31) && content.is_string(), who,
                ": an added token needs an integer id in 0..2^31-1 and a string content");
      specials[id.as_int()] = content.as_string();
      pieces.emplace(id.as_int(), content.as_string());
    }
  }
  if (const Json* unk = model.find("unk_token"); unk && unk->is_string())
    for (const auto& [id, piece] : pieces)
      if (piece == unk->as_string()) specials.emplace(id, piece);
  ENG_CHECK(!pieces.empty() && pieces.rbegin()->first == int64_t(pieces.size()) - 1, who, ": the ids of the ",
            pieces.size(), " tokens are not 0..", int64_t(pieces.size()) - 1, " (id ", pieces.rbegin()->first,
            " is the largest)");
  std::vector<std::string> bytes(pieces.size());
  std::vector<TokenType> types(pieces.size(), TokenType::Normal);
  std::map<std::string, int32_t> id_of;
  for (const auto& [id, piece] : pieces) {
    const size_t i = size_t(id);
    if (specials.count(id)) {
      bytes[i] = piece, types[i] = TokenType::Special;
    } else if (kind == TokenizerKind::ByteLevel) {
      ENG_CHECK(gpt2_unspell(piece, bytes[i]), who, ": token ", id, " \"", terminal_text(piece),
                "\" is not spelt in GPT-2's byte alphabet");
    } else {
      sentencepiece_piece_bytes(piece, bytes[i], types[i]);
    }
    id_of.emplace(piece, int32_t(id));
  }
  std::vector<Tokenizer::Merge> merges;
  if (const Json* ms = model.find("merges"); ms && !ms->is_null()) {
    ENG_CHECK(ms->is_array(), who, ": model.merges is not an array");
    for (size_t m = 0; m < ms->as_array().size(); ++m) {
      const auto [l, r] = merge_pair(ms->as_array()[m], m, who);
      const auto li = id_of.find(l), ri = id_of.find(r);
      ENG_CHECK(li != id_of.end() && ri != id_of.end(), who, ": merge ", m, " \"", terminal_text(l), " ",
                terminal_text(r), "\" names a token that is not in the vocabulary");
      merges.push_back({li->second, ri->second, int32_t(m)});
    }
  }
  return Tokenizer(kind, std::move(bytes), std::move(types), std::move(merges), who);
}

std::string tokenizer_json(const Tokenizer& tok) {
  const bool byte_level = tok.kind() == TokenizerKind::ByteLevel;
  const auto piece = [&](int32_t id) {
    if (tok.type(id) == TokenType::Special) return tok.bytes(id);
    return byte_level ? gpt2_spell_bytes(tok.bytes(id)) : sentencepiece_piece(tok, id);
  };
  Json::Object vocab;
  Json added = Json::array();
  std::string unk;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    vocab.emplace_back(piece(id), Json(id));
    if (tok.type(id) != TokenType::Special) continue;
    if (tok.bytes(id) == "<unk>") unk = "<unk>";
    Json t = Json::object();
    t.set("id", id);
    t.set("content", tok.bytes(id));
    t.set("single_word", false);
    t.set("lstrip", false);
    t.set("rstrip", false);
    t.set("normalized", false);
    t.set("special", true);
    added.push_back(std::move(t));
  }
  Json merges = Json::array();
  for (const Tokenizer::Merge& m : tok.merges()) merges.push_back(piece(m.left) + " " + piece(m.right));
  Json model = Json::object();
  model.set("type", "BPE");
  model.set("dropout", nullptr);
  model.set("unk_token", unk.empty() ? Json() : Json(unk));
  model.set("continuing_subword_prefix", nullptr);
  model.set("end_of_word_suffix", nullptr);
  model.set("fuse_unk", !byte_level);
  model.set("byte_fallback", !byte_level);
  model.set("vocab", Json::object(std::move(vocab)));
  model.set("merges", std::move(merges));
  Json root = Json::object();
  root.set("version", "1.0");
  root.set("truncation", nullptr);
  root.set("padding", nullptr);
  root.set("added_tokens", std::move(added));
  if (byte_level) {
    Json level = Json::object();
    level.set("type", "ByteLevel");
    level.set("add_prefix_space", false);
    level.set("trim_offsets", true);
    level.set("use_regex", true);
    root.set("normalizer", nullptr);
    root.set("pre_tokenizer", level);
    root.set("post_processor", level);
    root.set("decoder", level);
  } else {
    const auto step = [](const char* type, std::initializer_list<std::pair<const char*, Json>> fields) {
      Json s = Json::object();
      s.set("type", type);
      for (const auto& [k, v] : fields) s.set(k, v);
      return s;
    };
    Json pattern = Json::object();
    pattern.set("String", " ");
    Json normalizers = Json::array({step("Prepend", {{"prepend", "\u2581"}}),
                                    step("Replace", {{"pattern", pattern}, {"content", "\u2581"}})});
    Json decoder_pattern = Json::object();
    decoder_pattern.set("String", "\u2581");
    Json decoders = Json::array({step("Replace", {{"pattern", decoder_pattern}, {"content", " "}}),
                                 step("ByteFallback", {}), step("Fuse", {}),
                                 step("Strip", {{"content", " "}, {"start", 1}, {"stop", 0}})});
    root.set("normalizer", step("Sequence", {{"normalizers", normalizers}}));
    root.set("pre_tokenizer", nullptr);
    root.set("post_processor", nullptr);
    root.set("decoder", step("Sequence", {{"decoders", decoders}}));
  }
  root.set("model", std::move(model));
  return root.dump();
}

void save_tokenizer_json(const Tokenizer& tok, const std::string& path) {
  const std::string text = tokenizer_json(tok);
  write_file_atomic(path, std::vector<uint8_t>(text.begin(), text.end()), "tokenizer");
}

}  // namespace eng
