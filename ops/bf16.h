// bfloat16: the upper 16 bits of an f32 (sign, 8 exponent bits, 7 mantissa bits), f32's range at 3 significant
// digits. Conversion from f32 is the one AVX512_BF16's vcvtneps2bf16 performs, so that packing by hand and by
// that instruction give the same bits: round to nearest, ties to even; zero and denormals become zero of the same
// sign; infinities stay; a NaN stays a NaN of the same sign, made quiet, its payload truncated.
#pragma once
#include <cstdint>
#include <cstring>

namespace eng {

inline uint16_t bf16_from_f32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t exponent = u & 0x7F800000u;
  if (exponent == 0) return uint16_t((u >> 16) & 0x8000u);
  if (exponent == 0x7F800000u) return uint16_t((u >> 16) | ((u & 0x7FFFFFu) ? 0x40u : 0u));
  u += 0x7FFFu + ((u >> 16) & 1u);  // a carry out of the mantissa bumps the exponent, to infinity at the top
  return uint16_t(u >> 16);
}

inline float f32_from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// x rounded to the nearest bf16, as an f32.
inline float bf16_round(float x) { return f32_from_bf16(bf16_from_f32(x)); }

}  // namespace eng
