// exp for f32 in branch-free arithmetic, so that loops calling it vectorise (std::expf is a libm call per
// element). Cody–Waite range reduction x = n ln2 + r, |r| <= ln2/2, a degree-6 Taylor polynomial of e^r (Horner),
// and 2^n put into the exponent bits. Max relative error against exp in double: 2.4e-7 (about 3 ulp) on [-87, 88]
// (tests/test_fast_exp.cpp); inputs below -87.3 give 0 (no denormals) and above 88.3 give exp(88.3).
#pragma once
#include <cstdint>
#include <cstring>

namespace eng {

inline float fast_exp(float x) {
  x = x < -87.3f ? -87.3f : x > 88.3f ? 88.3f : x;  // keeps 2^n a normal float
  // round(x / ln2) by the 1.5 * 2^23 trick: plain adds, which vectorise even without SSE4.1's roundps
  const float n = (x * 1.44269504088896341f + 12582912.f) - 12582912.f;
  float r = x - n * 0.693145751953125f;                        // ln2 in two parts: exact high product
  r = r - n * 1.42860682030941723212e-6f;
  float p = 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const int32_t bits = (int32_t(n) + 127) << 23;  // 2^n; n >= -126 after the clamp
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x <= -87.3f ? 0.f : p * scale;
}

// The same call for f64 stays exact: double paths are the references.
inline double fast_exp(double x) { return __builtin_exp(x); }

}  // namespace eng
