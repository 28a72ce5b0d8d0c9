#include "engine/exact_norm.h"

#include <cmath>

namespace eng {
namespace {

constexpr int kLowest = -350;  // the weight of bit 0: below the least square of an f32 subnormal times 2^-53

}  // namespace

void ExactSquares::normalize() {
  uint64_t carry = 0;
  for (uint64_t& l : limbs) {
    l += carry;
    carry = l >> 32;
    l &= 0xffffffffull;
  }
  limbs[kLimbs - 1] += carry << 32;  // beyond every finite square times 2^40: not reached
  pending = 0;
}

void ExactSquares::add(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double d = double(x[i]) * double(x[i]);  // exact
    if (d == 0) continue;
    if (!std::isfinite(d)) {
      nonfinite += d;
      continue;
    }
    int e = 0;
    const double m = std::frexp(d, &e);  // d = m 2^e, m in [0.5, 1)
    const uint64_t mantissa = uint64_t(std::ldexp(m, 53));  // d = mantissa 2^(e - 53), exactly
    const int bit = e - 53 - kLowest;
    const int limb = bit / 32, shift = bit % 32;
    // mantissa << shift spans at most 85 bits: three limbs, each receiving less than 2^32. In 64-bit halves (no
    // __int128 on 32-bit targets): the shifted value's bits 0..63, then the bits shifted past 64.
    const uint64_t low = mantissa << shift, high = shift == 0 ? 0 : mantissa >> (64 - shift);
    limbs[size_t(limb)] += low & 0xffffffffull;
    limbs[size_t(limb) + 1] += low >> 32;
    limbs[size_t(limb) + 2] += high;
    if (++pending == (uint64_t(1) << 31)) normalize();  // each limb stays below 2^63
  }
}

void ExactSquares::merge(const ExactSquares& other) {
  ExactSquares o = other;
  o.normalize();
  normalize();
  for (int i = 0; i < kLimbs; ++i) limbs[size_t(i)] += o.limbs[size_t(i)];
  nonfinite += o.nonfinite;
  normalize();
}

double ExactSquares::value() const {
  if (nonfinite != 0) return nonfinite;
  ExactSquares c = *this;
  c.normalize();
  double sum = 0;
  for (int i = kLimbs - 1; i >= 0; --i) sum += std::ldexp(double(c.limbs[size_t(i)]), 32 * i + kLowest);
  return sum;
}

}  // namespace eng
