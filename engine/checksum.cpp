#include "engine/checksum.h"

#include <array>

namespace eng {

namespace {

// Slicing-by-8 (Intel's method): t[0] is the byte-wise table of the reflected polynomial 0xEDB88320,
// t[k][i] the CRC of byte i followed by k zero bytes, so that eight input bytes take eight lookups.
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

CrcTables make_crc_tables() {
  CrcTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (size_t k = 1; k < 8; ++k)
    for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  return t;
}

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  static const CrcTables t = make_crc_tables();
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, data += 8) {
    const uint32_t lo = c ^ le32(data), hi = le32(data + 4);
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
        t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; n > 0; --n, ++data) c = t[0][(c ^ *data) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler) {
  constexpr uint32_t kMod = 65521;
  // 5552 is the most bytes whose sums cannot overflow 32 bits before the modulo (zlib's NMAX).
  constexpr size_t kBlock = 5552;
  uint32_t a = adler & 0xFFFF, b = adler >> 16;
  while (n > 0) {
    const size_t k = n < kBlock ? n : kBlock;
    for (size_t i = 0; i < k; ++i) {
      a += data[i];
      b += a;
    }
    a %= kMod;
    b %= kMod;
    data += k;
    n -= k;
  }
  return (b << 16) | a;
}

}  // namespace eng
