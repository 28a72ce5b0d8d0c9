#include "datasets/byte_unicode.h"

#include <array>

#include "engine/json.h"

namespace eng {

namespace {

bool printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct ByteMap {
  std::array<uint32_t, 256> code_point{};
  std::array<uint8_t, 256> order{};
  std::array<int, 0x144> byte_of{};  // code point -> byte, -1 where none
};

const ByteMap& byte_map() {
  static const ByteMap m = [] {
    ByteMap m;
    m.byte_of.fill(-1);
    int next = 0, extra = 0;
    for (int b = 0; b < 256; ++b)
      if (printable(b)) m.order[size_t(next++)] = uint8_t(b), m.code_point[size_t(b)] = uint32_t(b);
    for (int b = 0; b < 256; ++b)
      if (!printable(b)) m.order[size_t(next++)] = uint8_t(b), m.code_point[size_t(b)] = uint32_t(256 + extra++);
    for (int b = 0; b < 256; ++b) m.byte_of[m.code_point[size_t(b)]] = b;
    return m;
  }();
  return m;
}

}  // namespace

uint32_t gpt2_byte_to_code_point(uint8_t b) { return byte_map().code_point[b]; }

uint8_t gpt2_byte_order(int i) { return byte_map().order[size_t(i)]; }

std::string gpt2_spell_bytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    const uint32_t cp = gpt2_byte_to_code_point(uint8_t(c));
    if (cp < 0x80) {
      out += char(cp);
    } else {  // every mapped code point is below U+0800: two bytes
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

bool gpt2_unspell(std::string_view spelling, std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < spelling.size();) {
    const size_t len = utf8_seq_len(spelling, i);
    uint32_t cp;
    if (len == 1) {
      cp = uint8_t(spelling[i]);
    } else if (len == 2) {
      cp = (uint32_t(uint8_t(spelling[i])) & 0x1F) << 6 | (uint32_t(uint8_t(spelling[i + 1])) & 0x3F);
    } else {
      return false;
    }
    const int b = cp < byte_map().byte_of.size() ? byte_map().byte_of[cp] : -1;
    if (b < 0) return false;
    bytes += char(b);
    i += len;
  }
  return true;
}

}  // namespace eng
