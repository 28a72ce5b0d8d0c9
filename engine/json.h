// A small JSON value, strict parser and compact serializer (RFC 8259), for file headers and configs.
// Integers without fraction or exponent are kept exactly as int64 (file offsets above 2^53 must
// survive a round trip); other numbers are doubles. Objects keep insertion order and refuse
// duplicate keys. Strings hold UTF-8; the parser rejects invalid UTF-8 and decodes \uXXXX escapes
// (surrogate pairs included). Every failure throws eng::Error starting with "json: ".
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace eng {

class Json {
 public:
  enum class Type { Null, Bool, Int, Double, String, Array, Object };
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  // Parsing refuses containers nested deeper than this.
  static constexpr int kMaxDepth = 64;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::Bool), bool_(b) {}
  Json(double d) : type_(Type::Double), double_(d) {}
  Json(const char* s) : type_(Type::String), string_(s) {}
  Json(std::string s) : type_(Type::String), string_(std::move(s)) {}
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Json(I v) : type_(Type::Int), int_(checked_int(v)) {}
  static Json array(Array items = {});
  static Json object();
  // An object of these members, in order; a repeated key throws (checked with a hash set: vocabularies are big).
  static Json object(Object members);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_int() const { return type_ == Type::Int; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Double; }
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  // Typed access; the wrong type throws ("json: expected a string, got an array").
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;  // an int converts
  const std::string& as_string() const;
  const Array& as_array() const;
  const Object& as_object() const;

  // Objects: the member named `key`, or nullptr. Linear search: objects here are small.
  const Json* find(std::string_view key) const;
  // Appends a member; a key already present throws.
  void set(std::string key, Json value);
  // Arrays: appends an element.
  void push_back(Json value);

  // Compact text (no whitespace). Doubles are written with the fewest digits that read back
  // exactly and keep a ".0" when integral, so they stay doubles; NaN and infinity throw.
  std::string dump() const;
  // Parses one value; anything but whitespace after it is an error. Messages give the byte offset.
  static Json parse(std::string_view text);

 private:
  template <class I>
  static int64_t checked_int(I v) {
    if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(int64_t))
      if (v > uint64_t(INT64_MAX)) fail_int_range();
    return int64_t(v);
  }
  [[noreturn]] static void fail_int_range();
  void dump_to(std::string& out) const;

  Type type_ = Type::Null;
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  Array array_;
  Object object_;
  friend class JsonParser;
};

const char* json_type_name(Json::Type t);  // "null", "a boolean", "an integer", ... for messages

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
bool valid_utf8(std::string_view s);
// The length of the well-formed UTF-8 sequence starting at s[i], or 0 where none starts.
size_t utf8_seq_len(std::string_view s, size_t i);

}  // namespace eng
