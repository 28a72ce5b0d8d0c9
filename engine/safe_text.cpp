#include "engine/safe_text.h"

#include <cstdint>
#include <cstdio>

#include "engine/json.h"

namespace eng {

namespace {

// The length of the well-formed UTF-8 sequence at s[i] (engine/json.h: no overlong forms, no surrogates, nothing
// above U+10FFFF) and its code point; 0 when the byte there does not start one.
size_t utf8_at(const std::string& s, size_t i, uint32_t& cp) {
  const size_t n = utf8_seq_len(s, i);
  if (n == 0) return 0;
  cp = static_cast<unsigned char>(s[i]) & (n == 1 ? 0x7F : 0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return n;
}

bool is_control(uint32_t cp) { return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F); }

}  // namespace

std::string terminal_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_at(text, i, cp);
    if (n > 0 && !is_control(cp)) {
      out.append(text, i, n);
      i += n;
      continue;
    }
    // A control character is escaped byte by byte, so that U+009B (C2 9B) reads \xc2\x9b as the file holds it.
    for (size_t k = 0; k < (n > 0 ? n : 1); ++k) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", unsigned(static_cast<unsigned char>(text[i + k])));
      out += hex;
    }
    i += n > 0 ? n : 1;
  }
  return out;
}

std::string xml_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_at(text, i, cp);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD, the replacement character
      ++i;
      continue;
    }
    switch (cp) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (!is_control(cp)) out.append(text, i, n);
    }
    i += n;
  }
  return out;
}

}  // namespace eng
