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

// Eight bytes into the running (inverted) register c.
inline uint32_t step8(const CrcTables& t, uint32_t c, const uint8_t* data) {
  const uint32_t lo = c ^ le32(data), hi = le32(data + 4);
  return t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
         t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
}

uint32_t serial(const CrcTables& t, uint32_t c, const uint8_t* data, size_t n) {
  for (; n >= 8; n -= 8, data += 8) c = step8(t, c, data);
  for (; n > 0; --n, ++data) c = t[0][(c ^ *data) & 0xFF] ^ (c >> 8);
  return c;
}

// Polynomials modulo P in the reflected order (bit 31 is x^0), as zlib's crc32_combine: a · b mod P.
uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ 0xEDB88320u : b >> 1;
  }
  return p;
}

// x^(8n) mod P: multiplying a CRC by it appends n zero bytes to its message (the powers x^(2^k) by squaring).
uint32_t shift_operator(size_t n) {
  uint32_t p = 1u << 31, x2k = 1u << 23;  // x^0; x^8, the shift by one byte
  for (; n > 0; n >>= 1, x2k = multmodp(x2k, x2k))
    if (n & 1) p = multmodp(x2k, p);
  return p;
}

}  // namespace

// Slicing-by-8 is a chain of dependent table lookups, about 2 GB/s. Past 64 KiB the data is cut into four
// equal parts whose CRCs advance together, four independent chains, and are joined as zlib's crc32_combine does:
// CRC(A B) = CRC(A) · x^(8|B|) mod P xor CRC(B) (for the register without its final inversion, as below).
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  static const CrcTables t = make_crc_tables();
  uint32_t c = ~crc;
  if (n < (size_t(64) << 10)) return ~serial(t, c, data, n);
  const size_t part = n / 4 / 8 * 8;
  const uint8_t *p1 = data + part, *p2 = p1 + part, *p3 = p2 + part;
  uint32_t c1 = 0, c2 = 0, c3 = 0;  // registers over B, C, D alone, from 0
  for (size_t i = 0; i < part; i += 8) {
    c = step8(t, c, data + i);
    c1 = step8(t, c1, p1 + i);
    c2 = step8(t, c2, p2 + i);
    c3 = step8(t, c3, p3 + i);
  }
  c3 = serial(t, c3, p3 + part, n - 4 * part);  // the part of D past the others' length
  // The register is linear in the message: over A B it is reg(A) · x^(8|B|) xor reg0(B), reg0 starting from 0.
  const uint32_t shift = shift_operator(part);
  c = multmodp(shift, c) ^ c1;
  c = multmodp(shift, c) ^ c2;
  c = multmodp(shift_operator(n - 3 * part), c) ^ c3;
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
