// The character classes GPT-2's pre-tokenisation rule reads (datasets/pretokenize.h): letters (\p{L}, general
// category L*), numbers (\p{N}, N*), white space (\s, the White_Space property) and everything else. The tables are
// generated from the Unicode Character Database (unicode_version(), datasets/unicode_class_tables.h by
// tools/reference/unicode_tables.py); a lookup is a binary search over a few hundred ranges, ASCII a table.
//
// Text here is bytes that are mostly UTF-8. A "unit" is one well-formed UTF-8 sequence (one code point) or, where
// none starts, one byte, which is of class Other: so every byte string splits into units and nothing is lost.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace eng {

enum class CharClass : uint8_t { Letter, Number, Space, Other };

CharClass char_class(uint32_t code_point);
const char* unicode_version();  // "15.0.0"

struct TextUnit {
  uint32_t len;  // bytes, 1..4
  CharClass cls;
};

// The unit starting at s[i] (i < s.size()).
TextUnit text_unit_at(std::string_view s, size_t i);

}  // namespace eng
