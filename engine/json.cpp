#include "engine/json.h"

#include <algorithm>
#include <clocale>
#include <cmath>
#include <cstdlib>
#include <unordered_set>

#include "engine/error.h"

namespace eng {

const char* json_type_name(Json::Type t) {
  switch (t) {
    case Json::Type::Null: return "null";
    case Json::Type::Bool: return "a boolean";
    case Json::Type::Int: return "an integer";
    case Json::Type::Double: return "a number";
    case Json::Type::String: return "a string";
    case Json::Type::Array: return "an array";
    case Json::Type::Object: return "an object";
  }
  return "?";
}

void Json::fail_int_range() { fail("json: integer does not fit in int64"); }

Json Json::array(Array items) {
  Json j;
  j.type_ = Type::Array;
  j.array_ = std::move(items);
  return j;
}

Json Json::object() {
  Json j;
  j.type_ = Type::Object;
  return j;
}

static void expect_type(const Json& j, Json::Type want) {
  ENG_CHECK(j.type() == want, "json: expected ", json_type_name(want), ", got ", json_type_name(j.type()));
}

bool Json::as_bool() const {
  expect_type(*this, Type::Bool);
  return bool_;
}

int64_t Json::as_int() const {
  expect_type(*this, Type::Int);
  return int_;
}

double Json::as_double() const {
  if (type_ == Type::Int) return double(int_);
  expect_type(*this, Type::Double);
  return double_;
}

const std::string& Json::as_string() const {
  expect_type(*this, Type::String);
  return string_;
}

const Json::Array& Json::as_array() const {
  expect_type(*this, Type::Array);
  return array_;
}

const Json::Object& Json::as_object() const {
  expect_type(*this, Type::Object);
  return object_;
}

const Json* Json::find(std::string_view key) const {
  for (const auto& [k, v] : as_object())
    if (k == key) return &v;
  return nullptr;
}

Json Json::object(Object members) {
  std::unordered_set<std::string_view> keys;
  for (const auto& [k, v] : members) ENG_CHECK(keys.insert(k).second, "json: duplicate key \"", k, "\"");
  Json j = object();
  j.object_ = std::move(members);
  return j;
}

void Json::set(std::string key, Json value) {
  expect_type(*this, Type::Object);
  ENG_CHECK(find(key) == nullptr, "json: duplicate key \"", key, "\"");
  object_.emplace_back(std::move(key), std::move(value));
}

void Json::push_back(Json value) {
  expect_type(*this, Type::Array);
  array_.push_back(std::move(value));
}

// ---- UTF-8 ----

size_t utf8_seq_len(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return i + k < s.size() ? uint8_t(s[i + k]) : 0; };
  auto cont = [&](size_t k) { return (b(k) & 0xC0) == 0x80; };
  uint8_t c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    // E0 needs A0..BF (no overlong forms); ED needs 80..9F (no surrogates)
    uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return b(1) >= lo && b(1) <= hi && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    // F0 needs 90..BF (no overlong forms); F4 needs 80..8F (nothing above U+10FFFF)
    uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return b(1) >= lo && b(1) <= hi && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_seq_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

static void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// ---- serializer ----

static void dump_string(std::string& out, const std::string& s) {
  ENG_CHECK(valid_utf8(s), "json: cannot write a string that is not valid UTF-8");
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    uint8_t c = uint8_t(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// Numbers are written and read with a '.' whatever the program's locale, so a decimal comma cannot change the text.
static std::string format_double(double d, int precision) { return general_text(d, precision); }

// The value of a JSON number's text, correctly rounded by strtod, its '.' given as the decimal point of the program's
// locale; an underflow reads as a zero of its sign, an overflow is not ok. std::from_chars reads the same values, but
// it brought 24 KB of its own and glibc's locale loading into the static lean embed (docs/embedding.md).
static double read_double(const std::string& text, bool& ok) {
  std::string local = text;
  if (const size_t dot = local.find('.'); dot != std::string::npos)
    local.replace(dot, 1, std::localeconv()->decimal_point);
  char* end = nullptr;
  const double d = std::strtod(local.c_str(), &end);
  ok = end == local.c_str() + local.size() && std::isfinite(d);
  return d;
}

static void dump_double(std::string& out, double d) {
  ENG_CHECK(std::isfinite(d), "json: cannot write ", d, ": JSON has no NaN or infinity");
  std::string s;
  for (int p = 15; p <= 17; ++p) {  // the shortest of these that reads back exactly; 17 always does
    s = format_double(d, p);
    bool ok;
    if (read_double(s, ok) == d) break;
  }
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  out += s;
}

void Json::dump_to(std::string& out) const {
  switch (type_) {
    case Type::Null: out += "null"; break;
    case Type::Bool: out += bool_ ? "true" : "false"; break;
    case Type::Int: out += std::to_string(int_); break;
    case Type::Double: dump_double(out, double_); break;
    case Type::String: dump_string(out, string_); break;
    case Type::Array:
      out += '[';
      for (size_t i = 0; i < array_.size(); ++i) {
        if (i) out += ',';
        array_[i].dump_to(out);
      }
      out += ']';
      break;
    case Type::Object:
      out += '{';
      for (size_t i = 0; i < object_.size(); ++i) {
        if (i) out += ',';
        dump_string(out, object_[i].first);
        out += ':';
        object_[i].second.dump_to(out);
      }
      out += '}';
      break;
  }
}

std::string Json::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

// ---- parser ----

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : s_(text) {}

  Json parse_document() {
    skip_ws();
    Json v = parse_value(0);
    skip_ws();
    if (pos_ < s_.size()) error("trailing characters after the value");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const { error_at(what, pos_); }
  [[noreturn]] void error_at(const std::string& what, size_t at) const {
    if (at >= s_.size()) fail("json: unexpected end of input at byte ", at);
    fail("json: ", what, " at byte ", at);
  }

  bool at_end() const { return pos_ >= s_.size(); }
  // '\0' at the end; callers never look for '\0', so it cannot be mistaken for a match
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  void skip_ws() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  void expect(char c, const char* what) {
    if (peek() != c) error(what);
    ++pos_;
  }

  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) error("invalid literal");
    pos_ += word.size();
  }

  Json parse_value(int depth) {
    if (at_end()) error("expected a value");
    char c = s_[pos_];
    if (c == '{' || c == '[') {
      if (depth >= Json::kMaxDepth) error("nesting deeper than " + std::to_string(Json::kMaxDepth) + " levels");
      return c == '{' ? parse_object(depth + 1) : parse_array(depth + 1);
    }
    if (c == '"') return Json(parse_string());
    if (c == 't') {
      literal("true");
      return Json(true);
    }
    if (c == 'f') {
      literal("false");
      return Json(false);
    }
    if (c == 'n') {
      literal("null");
      return Json();
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    error(std::string("unexpected character '") + c + "'");
  }

  Json parse_object(int depth) {
    Json obj = Json::object();
    std::unordered_set<std::string> keys;  // duplicate check without a quadratic scan of big headers
    ++pos_;
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return obj;
    }
    for (;;) {
      skip_ws();
      size_t key_at = pos_;
      if (peek() != '"') error("expected a string key");
      std::string key = parse_string();
      if (!keys.insert(key).second) error_at("duplicate key \"" + key + "\"", key_at);
      skip_ws();
      expect(':', "expected ':' after an object key");
      skip_ws();
      Json v = parse_value(depth);
      obj.object_.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}', "expected ',' or '}' in an object");
      return obj;
    }
  }

  Json parse_array(int depth) {
    Json arr = Json::array();
    ++pos_;
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return arr;
    }
    for (;;) {
      skip_ws();
      arr.array_.push_back(parse_value(depth));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']', "expected ',' or ']' in an array");
      return arr;
    }
  }

  uint32_t parse_hex4() {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = peek();
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) error("expected 4 hex digits after \\u");
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    return v;
  }

  // A \uXXXX escape (pos_ at the 'u'), joining a surrogate pair into one code point.
  uint32_t parse_unicode_escape(size_t esc_at) {
    ++pos_;
    uint32_t cp = parse_hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) error_at("unpaired low surrogate \\u" + hex4(cp), esc_at);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (s_.substr(pos_, 2) != "\\u") error_at("high surrogate \\u" + hex4(cp) + " not followed by a low one", esc_at);
      pos_ += 2;
      uint32_t lo = parse_hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) error_at("high surrogate \\u" + hex4(cp) + " not followed by a low one", esc_at);
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    return cp;
  }

  static std::string hex4(uint32_t v) {
    static const char* hex = "0123456789ABCDEF";
    return {hex[(v >> 12) & 15], hex[(v >> 8) & 15], hex[(v >> 4) & 15], hex[v & 15]};
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (at_end()) error("unterminated string");
      uint8_t c = uint8_t(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) error("unescaped control character in a string");
      if (c == '\\') {
        size_t esc_at = pos_++;
        char e = peek();
        if (at_end()) error("unterminated string");
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': append_utf8(out, parse_unicode_escape(esc_at)); continue;
          default: error_at(std::string("invalid escape '\\") + e + "'", esc_at);
        }
        ++pos_;
        continue;
      }
      size_t n = utf8_seq_len(s_, pos_);
      if (n == 0) error("invalid UTF-8 in a string");
      out.append(s_.substr(pos_, n));
      pos_ += n;
    }
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  Json parse_number() {
    size_t start = pos_;
    auto digit = [&] { return !at_end() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    auto digits = [&](const char* what) {
      if (!digit()) error(what);
      while (digit()) ++pos_;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (digit()) error_at("leading zero in a number", start);
    } else {
      digits("expected a digit");
    }
    bool integral = true;
    if (peek() == '.') {
      ++pos_;
      digits("expected a digit after '.'");
      integral = false;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits("expected a digit in the exponent");
      integral = false;
    }
    std::string text(s_.substr(start, pos_ - start));
    if (integral) {
      bool neg = text[0] == '-';
      uint64_t mag = 0;
      bool fits = true;
      // magnitude limit: 2^63 - 1, or 2^63 for a negative value
      const uint64_t limit = uint64_t(INT64_MAX) + (neg ? 1 : 0);
      for (size_t i = neg ? 1 : 0; i < text.size() && fits; ++i) {
        uint64_t d = uint64_t(text[i] - '0');
        if (mag > (limit - d) / 10) fits = false;
        mag = mag * 10 + d;
      }
      if (fits) return Json(neg ? int64_t(0 - mag) : int64_t(mag));
      // too big for int64: still valid JSON, kept as the nearest double
    }
    bool ok;
    double d = read_double(text, ok);
    if (!ok || !std::isfinite(d)) error_at("number " + text + " is out of range", start);
    return Json(d);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

Json Json::parse(std::string_view text) { return JsonParser(text).parse_document(); }

}  // namespace eng
