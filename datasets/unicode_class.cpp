#include "datasets/unicode_class.h"

#include <algorithm>
#include <array>
#include <iterator>

#include "datasets/unicode_class_tables.h"
#include "engine/json.h"

namespace eng {

namespace {

using unicode_tables::CodeRange;

template <size_t N>
bool in_table(const CodeRange (&table)[N], uint32_t cp) {
  const CodeRange* it = std::upper_bound(std::begin(table), std::end(table), cp,
                                         [](uint32_t c, const CodeRange& r) { return c < r.lo; });
  return it != std::begin(table) && cp <= (it - 1)->hi;
}

CharClass lookup(uint32_t cp) {
  if (in_table(unicode_tables::kLetters, cp)) return CharClass::Letter;
  if (in_table(unicode_tables::kNumbers, cp)) return CharClass::Number;
  if (in_table(unicode_tables::kSpaces, cp)) return CharClass::Space;
  return CharClass::Other;
}

// ASCII is most of most text: one load instead of three searches.
const std::array<CharClass, 128> kAscii = [] {
  std::array<CharClass, 128> t{};
  for (uint32_t c = 0; c < 128; ++c) t[c] = lookup(c);
  return t;
}();

uint32_t decode(std::string_view s, size_t i, size_t len) {
  const auto b = [&](size_t k) { return uint32_t(uint8_t(s[i + k])); };
  if (len == 2) return (b(0) & 0x1F) << 6 | (b(1) & 0x3F);
  if (len == 3) return (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
  return (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
}

}  // namespace

CharClass char_class(uint32_t code_point) { return code_point < 128 ? kAscii[code_point] : lookup(code_point); }

const char* unicode_version() { return unicode_tables::kVersion; }

TextUnit text_unit_at(std::string_view s, size_t i) {
  const uint8_t b = uint8_t(s[i]);
  if (b < 0x80) return {1, kAscii[b]};
  const size_t len = utf8_seq_len(s, i);
  if (len == 0) return {1, CharClass::Other};
  return {uint32_t(len), lookup(decode(s, i, len))};
}

}  // namespace eng
