// The SIMD body of every f32 kernel in engine/vec_kernels.h, written once over a vector type V that the
// including file defines (engine/vec_kernels_{avx2,avx512,neon}.cpp, each compiled for its instruction set).
// V gives: R (register of W floats), M (lane mask), load/store/set, add/sub/mul/div/min/max/sqrt/abs,
// scale2(p, n) = p 2^n for integral n by an add to the exponent field (the result must be normal), scale2_biased(p, t)
// the same with n given as t = n + 1.5 * 2^23 (n in t's low mantissa bits, which a shift by 23 moves to the exponent),
// fma(a, b, c) = a b + c, fnma(a, b, c) = c - a b, round (to nearest), lt/le/gt/isnan -> M, select(m, a, b),
// isinf_pos, mask_or, any, pow2i(n) = 2^n for integral n in [-126, 127], frexp(x, e) = mantissa in [1, 2) with e the
// exponent (positive normal x), copysign, hsum, hmax, first.
//
// Everything here is in an anonymous namespace on purpose: each including file has its own copy, compiled
// for its own target, and no inline function is shared between files built with different flags (the
// linker could otherwise keep an AVX-512 copy for the whole program). For the same reason this file uses
// no standard-library function.
#pragma once
#include <cstdint>

#include "engine/vec_kernels.h"

namespace eng {
namespace {

using R = V::R;
using M = V::M;
constexpr int64_t W = V::W;

// ---- math on registers ----
// Forced inline: called through a function pointer or from a lambda, GCC would otherwise keep some of them
// out of line and pay a call with spilled registers per vector.
#define ENG_VEC_INLINE inline __attribute__((always_inline))

// e^r - 1 - r on |r| <= ln2 / 2, as r^2 p(r) (Cephes expf's minimax polynomial).
ENG_VEC_INLINE R expm1_core(R r) {
  R p = V::set(1.9875691500e-4f);
  p = V::fma(p, r, V::set(1.3981999507e-3f));
  p = V::fma(p, r, V::set(8.3334519073e-3f));
  p = V::fma(p, r, V::set(4.1665795894e-2f));
  p = V::fma(p, r, V::set(1.6666665459e-1f));
  p = V::fma(p, r, V::set(5.0000001201e-1f));
  return V::mul(V::mul(r, r), p);
}

// Clamps x to [lo, hi] with a NaN going through: the x86 min/max return their second operand when either is
// NaN (NEON's propagate NaN anyway).
ENG_VEC_INLINE R clamp_keep_nan(R x, float lo, float hi) { return V::min(V::set(hi), V::max(V::set(lo), x)); }

// x = n ln2 + r with |r| <= ln2 / 2 (Cody–Waite: ln2 in two parts, the high one exact in a product).
ENG_VEC_INLINE R reduce_ln2(R x, R& n) {
  n = V::round(V::mul(x, V::set(1.44269504088896341f)));
  R r = V::fnma(n, V::set(0.693359375f), x);
  return V::fnma(n, V::set(-2.12194440e-4f), r);
}

// e^x = 2^n e^r for x in [-87.3, 88.7228] (out-of-range lanes are the callers' to replace): n = round(x log2 e)
// by the 1.5 * 2^23 trick (one fma puts x log2 e + magic into [2^23, 2^24), where floats are the integers, so it
// rounds to nearest with no round instruction), r = x - n ln2 in [-ln2/2, ln2/2] (Cody-Waite), and e^r by a
// degree-6 minimax polynomial (relative error 3.9e-9 in exact arithmetic, fitted by a reweighted least squares
// on Chebyshev nodes), 2^n then added to its exponent field. NaN stays NaN.
// K exponentials side by side, each step done for all K before the next: GCC keeps the statement order on x86, and
// a CPU with a small out-of-order window then overlaps the K dependent chains instead of running them one after
// the other (K = 4 is 16 % faster than K = 1 on the 2-vCPU EPYC of docs/kernels.md).
template <int K>
ENG_VEC_INLINE void exp_core(const R* x, R* y) {
  const R magic = V::set(12582912.f);
  R t[K], n[K], r[K], p[K];
  for (int j = 0; j < K; ++j) t[j] = V::fma(x[j], V::set(1.44269504088896341f), magic);
  for (int j = 0; j < K; ++j) n[j] = V::sub(t[j], magic);
  for (int j = 0; j < K; ++j) r[j] = V::fnma(n[j], V::set(0.693359375f), x[j]);
  for (int j = 0; j < K; ++j) r[j] = V::fnma(n[j], V::set(-2.12194440e-4f), r[j]);
  for (int j = 0; j < K; ++j) p[j] = V::fma(V::set(1.3814608100801706e-3f), r[j], V::set(8.368710055947304e-3f));
  for (int j = 0; j < K; ++j) p[j] = V::fma(p[j], r[j], V::set(4.166838899254799e-2f));
  for (int j = 0; j < K; ++j) p[j] = V::fma(p[j], r[j], V::set(1.666652113199234e-1f));
  for (int j = 0; j < K; ++j) p[j] = V::fma(p[j], r[j], V::set(4.999999403953552e-1f));
  for (int j = 0; j < K; ++j) p[j] = V::fma(p[j], r[j], V::set(1.f));
  for (int j = 0; j < K; ++j) p[j] = V::fma(p[j], r[j], V::set(1.f));
  for (int j = 0; j < K; ++j) y[j] = V::scale2_biased(p[j], t[j]);
}

// e^x: 0 below -87.3 (no denormal is ever produced: they are slow on some CPUs, and masked logits of -inf are
// common), +inf above ln(FLT_MAX), NaN stays NaN. In range p e^r is in [0.7, 1.42] and n in [-126, 128], so the
// result is normal.
template <int K>
ENG_VEC_INLINE void vexp(const R* x, R* y) {
  exp_core<K>(x, y);
  for (int j = 0; j < K; ++j) {
    y[j] = V::select(V::lt(x[j], V::set(-87.3f)), V::set(0.f), y[j]);
    y[j] = V::select(V::gt(x[j], V::set(88.7228f)), V::set(__builtin_inff()), y[j]);
  }
}
ENG_VEC_INLINE R vexp(R x) {
  R y;
  vexp<1>(&x, &y);
  return y;
}

// e^x for x <= 0 or NaN (a logit minus its row's maximum): vexp without the overflow test.
template <int K>
ENG_VEC_INLINE void vexp_nonpos(const R* x, R* y) {
  exp_core<K>(x, y);
  for (int j = 0; j < K; ++j) y[j] = V::select(V::lt(x[j], V::set(-87.3f)), V::set(0.f), y[j]);
}
ENG_VEC_INLINE R vexp_nonpos(R x) {
  R y;
  vexp_nonpos<1>(&x, &y);
  return y;
}

// e^x - 1 = 2^n (1 + q) - 1 = 2^n q + (2^n - 1) with q = e^r - 1: relative accuracy near 0, where
// n = 0 and the result is q itself. For x <= 88 (the callers pass x <= 0); -1 below -88; NaN stays NaN.
ENG_VEC_INLINE R vexpm1(R x) {
  R n;
  const R r = reduce_ln2(clamp_keep_nan(x, -88.f, 88.f), n);
  const R q = V::add(expm1_core(r), r);
  const R s = V::pow2i(n);
  return V::fma(s, q, V::sub(s, V::set(1.f)));
}

// log x (Cephes logf): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m by a minimax polynomial in m - 1.
// Denormals are scaled up first; 0 gives -inf, negatives NaN, +inf stays +inf.
ENG_VEC_INLINE R vlog(R x) {
  const M tiny = V::lt(x, V::set(1.17549435e-38f));
  R xs = V::select(tiny, V::mul(x, V::set(8388608.f)), x);
  R e;
  R m = V::frexp(xs, e);
  e = V::select(tiny, V::sub(e, V::set(23.f)), e);
  const M big = V::gt(m, V::set(1.41421356f));
  m = V::select(big, V::mul(m, V::set(0.5f)), m);
  e = V::select(big, V::add(e, V::set(1.f)), e);
  const R f = V::sub(m, V::set(1.f)), z = V::mul(f, f);
  R p = V::set(7.0376836292e-2f);
  p = V::fma(p, f, V::set(-1.1514610310e-1f));
  p = V::fma(p, f, V::set(1.1676998740e-1f));
  p = V::fma(p, f, V::set(-1.2420140846e-1f));
  p = V::fma(p, f, V::set(1.4249322787e-1f));
  p = V::fma(p, f, V::set(-1.6668057665e-1f));
  p = V::fma(p, f, V::set(2.0000714765e-1f));
  p = V::fma(p, f, V::set(-2.4999993993e-1f));
  p = V::fma(p, f, V::set(3.3333331174e-1f));
  R y = V::mul(V::mul(p, f), z);
  y = V::fma(e, V::set(-2.12194440e-4f), y);
  y = V::fnma(V::set(0.5f), z, y);
  y = V::add(f, y);
  y = V::fma(e, V::set(0.693359375f), y);
  y = V::select(V::le(x, V::set(0.f)), V::set(-__builtin_inff()), y);
  y = V::select(V::lt(x, V::set(0.f)), V::set(__builtin_nanf("")), y);
  y = V::select(V::isinf_pos(x), x, y);
  return V::select(V::isnan(x), x, y);
}

// tanh x = -e / (e + 2) with e = expm1(-2|x|) in (-1, 0], sign restored: no overflow, relative accuracy
// near 0, and exactly +-1 in the tails (a true division: an estimated reciprocal would miss 1 by an ulp).
ENG_VEC_INLINE R vtanh(R x) {
  const R e = vexpm1(V::mul(V::abs(x), V::set(-2.f)));
  return V::copysign(V::div(V::mul(e, V::set(-1.f)), V::add(e, V::set(2.f))), x);
}

// s = 1 / (1 + e^-x), exactly 0 and 1 in the tails, and 1 - s without cancellation (the derivatives need
// it): e^-x s where x >= 0 (e^-x <= 1), 1 - s where s < 1/2.
ENG_VEC_INLINE R vsigmoid_pair(R x, R& one_minus) {
  const R e = vexp(V::mul(x, V::set(-1.f)));
  const R s = V::div(V::set(1.f), V::add(V::set(1.f), e));
  one_minus = V::select(V::lt(x, V::set(0.f)), V::sub(V::set(1.f), s), V::mul(e, s));
  return s;
}
ENG_VEC_INLINE R vsigmoid(R x) {
  R one_minus;
  return vsigmoid_pair(x, one_minus);
}

// erf x = x P(x^2) / Q(x^2) on [-4, 4] (a minimax rational form, 7e-8 absolute in exact arithmetic), and
// +-1 beyond, where erf differs from +-1 by less than 2e-8. NaN stays NaN.
template <int K>
ENG_VEC_INLINE void verf(const R* x, R* y) {
  R z[K], z2[K], p[K], q[K];
  for (int j = 0; j < K; ++j) z[j] = clamp_keep_nan(x[j], -4.f, 4.f);
  for (int j = 0; j < K; ++j) z2[j] = V::mul(z[j], z[j]);
  for (int j = 0; j < K; ++j) p[j] = V::fma(V::set(-2.72614225801306e-10f), z2[j], V::set(2.77068142495902e-08f));
  for (int j = 0; j < K; ++j) q[j] = V::fma(V::set(-1.45660718464996e-05f), z2[j], V::set(-2.13374055278905e-04f));
  for (int j = 0; j < K; ++j) p[j] = V::fma(p[j], z2[j], V::set(-2.10102402082508e-06f));
  for (int j = 0; j < K; ++j) q[j] = V::fma(q[j], z2[j], V::set(-1.68282697438203e-03f));
  for (int j = 0; j < K; ++j) p[j] = V::fma(p[j], z2[j], V::set(-5.69250639462346e-05f));
  for (int j = 0; j < K; ++j) q[j] = V::fma(q[j], z2[j], V::set(-7.37332916720468e-03f));
  for (int j = 0; j < K; ++j) p[j] = V::fma(p[j], z2[j], V::set(-7.34990630326855e-04f));
  for (int j = 0; j < K; ++j) q[j] = V::fma(q[j], z2[j], V::set(-1.42647390514189e-02f));
  for (int j = 0; j < K; ++j) p[j] = V::fma(p[j], z2[j], V::set(-2.95459980854025e-03f));
  for (int j = 0; j < K; ++j) p[j] = V::fma(p[j], z2[j], V::set(-1.60960333262415e-02f));
  for (int j = 0; j < K; ++j) y[j] = V::div(V::mul(z[j], p[j]), q[j]);
}

// Phi(x) = (1 + erf(x / sqrt 2)) / 2
template <int K>
ENG_VEC_INLINE void vnormal_cdf(const R* x, R* y) {
  R s[K];
  for (int j = 0; j < K; ++j) s[j] = V::mul(x[j], V::set(0.70710678118654752f));
  verf<K>(s, y);
  for (int j = 0; j < K; ++j) y[j] = V::fma(y[j], V::set(0.5f), V::set(0.5f));
}
ENG_VEC_INLINE R vnormal_cdf(R x) {
  R y;
  vnormal_cdf<1>(&x, &y);
  return y;
}

constexpr float kSqrt2OverPi = 0.79788456080286535588f, kGeluCubic = 0.044715f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// gelu_tanh: 0.5 x (1 + tanh u) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
ENG_VEC_INLINE R gelu_tanh_u2(R x) {
  const R x2 = V::mul(x, x);
  return V::mul(V::mul(x, V::fma(x2, V::set(kGeluCubic), V::set(1.f))), V::set(2 * kSqrt2OverPi));
}

// ---- loops ----

// Loads the n < W floats at p into a register padded with `fill`.
R load_tail(const float* p, int64_t n, float fill) {
  float buf[W];
  for (int64_t i = 0; i < W; ++i) buf[i] = i < n ? p[i] : fill;
  return V::load(buf);
}
void store_tail(float* p, R x, int64_t n) {
  float buf[W];
  V::store(buf, x);
  for (int64_t i = 0; i < n; ++i) p[i] = buf[i];
}

template <class F>
void map1(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, f(V::load(x + i)));
  if (i < n) store_tail(y + i, f(load_tail(x + i, n - i, 0.f)), n - i);
}
// map1 four registers at a time through f4 (arrays of four in and out, its steps interleaved: see exp_core), the
// rest through f1.
template <class F4, class F1>
void map1_x4(const float* x, float* y, int64_t n, F4 f4, F1 f1) {
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    R v[4], out[4];
    for (int j = 0; j < 4; ++j) v[j] = V::load(x + i + j * W);
    f4(v, out);
    for (int j = 0; j < 4; ++j) V::store(y + i + j * W, out[j]);
  }
  map1(x + i, y + i, n - i, f1);
}
template <class F>
void map2(const float* a, const float* b, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, f(V::load(a + i), V::load(b + i)));
  if (i < n) store_tail(y + i, f(load_tail(a + i, n - i, 0.f), load_tail(b + i, n - i, 1.f)), n - i);
}
// map2 four registers at a time through f4 (as map1_x4), the rest through f1.
template <class F4, class F1>
void map2_x4(const float* a, const float* b, float* y, int64_t n, F4 f4, F1 f1) {
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    R va[4], vb[4], out[4];
    for (int j = 0; j < 4; ++j) va[j] = V::load(a + i + j * W), vb[j] = V::load(b + i + j * W);
    f4(va, vb, out);
    for (int j = 0; j < 4; ++j) V::store(y + i + j * W, out[j]);
  }
  map2(a + i, b + i, y + i, n - i, f1);
}
// sum over i of f(a_i, b_i) with W lanes, padded with fa and fb (chosen so f(fa, fb) = 0)
template <class F>
float reduce_sum(const float* a, const float* b, int64_t n, float fa, float fb, F f) {
  R acc0 = V::set(0.f), acc1 = V::set(0.f);
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    acc0 = V::add(acc0, f(V::load(a + i), V::load(b + i)));
    acc1 = V::add(acc1, f(V::load(a + i + W), V::load(b + i + W)));
  }
  for (; i + W <= n; i += W) acc0 = V::add(acc0, f(V::load(a + i), V::load(b + i)));
  if (i < n) acc1 = V::add(acc1, f(load_tail(a + i, n - i, fa), load_tail(b + i, n - i, fb)));
  return V::hsum(V::add(acc0, acc1));
}

void exp_k(const float* x, float* y, int64_t n) {
  map1_x4(x, y, n, [](const R* v, R* e) { vexp<4>(v, e); }, [](R v) { return vexp(v); });
}
void log_k(const float* x, float* y, int64_t n) { map1(x, y, n, vlog); }
void tanh_k(const float* x, float* y, int64_t n) { map1(x, y, n, vtanh); }
void sigmoid_k(const float* x, float* y, int64_t n) { map1(x, y, n, vsigmoid); }
void silu_k(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](R v) { return V::mul(v, vsigmoid(v)); });
}
void gelu_tanh_k(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](R v) { return V::mul(v, vsigmoid(gelu_tanh_u2(v))); });
}
void gelu_erf_k(const float* x, float* y, int64_t n) {
  auto gelu4 = [](const R* v, R* g) {
    vnormal_cdf<4>(v, g);
    for (int j = 0; j < 4; ++j) g[j] = V::mul(v[j], g[j]);
  };
  map1_x4(x, y, n, gelu4, [](R v) { return V::mul(v, vnormal_cdf(v)); });
}
void elu_k(const float* x, float* y, int64_t n, float alpha) {
  const R a = V::set(alpha);
  map1(x, y, n, [a](R v) { return V::select(V::gt(v, V::set(0.f)), v, V::mul(a, vexpm1(v))); });
}

void elu_plus_one_k(const float* x, float* y, int64_t n) {
  auto map4 = [](const R* v, R* out) {
    R neg[4], e[4];
    for (int j = 0; j < 4; ++j) neg[j] = V::min(V::set(0.f), v[j]);
    vexp_nonpos<4>(neg, e);
    for (int j = 0; j < 4; ++j) out[j] = V::select(V::gt(v[j], V::set(0.f)), V::add(v[j], V::set(1.f)), e[j]);
  };
  map1_x4(x, y, n, map4, [](R v) {
    const M pos = V::gt(v, V::set(0.f));
    return V::select(pos, V::add(v, V::set(1.f)), vexp_nonpos(V::min(V::set(0.f), v)));
  });
}

// d/dx x s(2u) = s + 2 x s (1 - s) u', u' = sqrt(2/pi) (1 + 3 c x^2)
void gelu_tanh_backward_k(const float* g, const float* x, float* dx, int64_t n) {
  map2(g, x, dx, n, [](R gi, R v) {
    R s1;
    const R s = vsigmoid_pair(gelu_tanh_u2(v), s1);
    const R du2 = V::mul(V::fma(V::mul(v, v), V::set(3 * kGeluCubic), V::set(1.f)), V::set(2 * kSqrt2OverPi));
    const R d = V::fma(V::mul(V::mul(v, s), s1), du2, s);
    return V::mul(gi, d);
  });
}
// d/dx = Phi(x) + x phi(x)
void gelu_erf_backward_k(const float* g, const float* x, float* dx, int64_t n) {
  auto grad4 = [](const R* gi, const R* v, R* d) {
    R e[4], pdf[4], cdf[4];
    for (int j = 0; j < 4; ++j) e[j] = V::mul(V::mul(v[j], v[j]), V::set(-0.5f));
    vexp<4>(e, pdf);
    vnormal_cdf<4>(v, cdf);
    for (int j = 0; j < 4; ++j) d[j] = V::mul(gi[j], V::fma(v[j], V::mul(pdf[j], V::set(kInvSqrt2Pi)), cdf[j]));
  };
  map2_x4(g, x, dx, n, grad4, [](R gi, R v) {
    const R pdf = V::mul(vexp(V::mul(V::mul(v, v), V::set(-0.5f))), V::set(kInvSqrt2Pi));
    return V::mul(gi, V::fma(v, pdf, vnormal_cdf(v)));
  });
}
void elu_backward_k(const float* g, const float* x, float* dx, int64_t n, float alpha) {
  const R a = V::set(alpha);
  map2(g, x, dx, n, [a](R gi, R v) { return V::select(V::gt(v, V::set(0.f)), gi, V::mul(V::mul(gi, a), vexp(v))); });
}
// d/dx x s(x) = s (1 + x (1 - s))
void silu_backward_k(const float* g, const float* x, float* dx, int64_t n) {
  map2(g, x, dx, n, [](R gi, R v) {
    R s1;
    const R s = vsigmoid_pair(v, s1);
    return V::mul(V::mul(gi, s), V::fma(v, s1, V::set(1.f)));
  });
}

void add_k(const float* a, const float* b, float* y, int64_t n) { map2(a, b, y, n, V::add); }
void sub_k(const float* a, const float* b, float* y, int64_t n) { map2(a, b, y, n, V::sub); }
void mul_k(const float* a, const float* b, float* y, int64_t n) { map2(a, b, y, n, V::mul); }
void div_k(const float* a, const float* b, float* y, int64_t n) { map2(a, b, y, n, V::div); }

float sum_k(const float* x, int64_t n) {
  return reduce_sum(x, x, n, 0.f, 0.f, [](R a, R) { return a; });
}
// Four FMA chains, so that the loop runs at load speed (the GEMV of generation at batch 1 is this loop).
float dot_k(const float* a, const float* b, int64_t n) {
  R acc[4] = {V::set(0.f), V::set(0.f), V::set(0.f), V::set(0.f)};
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W)
    for (int j = 0; j < 4; ++j) acc[j] = V::fma(V::load(a + i + j * W), V::load(b + i + j * W), acc[j]);
  for (; i + W <= n; i += W) acc[0] = V::fma(V::load(a + i), V::load(b + i), acc[0]);
  if (i < n) acc[1] = V::fma(load_tail(a + i, n - i, 0.f), load_tail(b + i, n - i, 0.f), acc[1]);
  return V::hsum(V::add(V::add(acc[0], acc[1]), V::add(acc[2], acc[3])));
}
float max_k(const float* x, int64_t n) {
  R m = V::set(-__builtin_inff());
  M nan = V::isnan(m);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const R v = V::load(x + i);
    nan = V::mask_or(nan, V::isnan(v));
    m = V::max(m, v);
  }
  if (i < n) {
    const R v = load_tail(x + i, n - i, -__builtin_inff());
    nan = V::mask_or(nan, V::isnan(v));
    m = V::max(m, v);
  }
  return V::any(nan) ? __builtin_nanf("") : V::hmax(m);
}

// The rows of a softmax are usually consecutive, and its exponentials are compute-bound: while a row computes
// them, NextRow fetches the next row's cache line (16 floats) at i so that the next row's max pass does not wait for memory.
// A prefetch never faults, so the last row reaching past its buffer is harmless (the address is formed as an
// integer: a pointer past the buffer would be undefined behaviour).
template <bool NextRow>
ENG_VEC_INLINE void prefetch_next_row(const float* x, float* y, int64_t n, int64_t i) {
  if (NextRow) {
    const uintptr_t next = reinterpret_cast<uintptr_t>(x + i) + uintptr_t(n) * sizeof(float);
    __builtin_prefetch(reinterpret_cast<const void*>(next));
    if (y) {
      const uintptr_t next_y = reinterpret_cast<uintptr_t>(y + i) + uintptr_t(n) * sizeof(float);
      __builtin_prefetch(reinterpret_cast<const void*>(next_y), 1);
    }
  }
}

// Σ e^(x - mx), the terms stored in y when Store.
template <bool NextRow, bool Store>
float exp_sub_sum_rows(const float* x, float mx, float* y, int64_t n) {
  const R m = V::set(mx);
  R acc0 = V::set(0.f), acc1 = V::set(0.f);
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    for (int64_t k = 0; k < 4 * W; k += 16) prefetch_next_row<NextRow>(x, Store ? y : nullptr, n, i + k);
    R d[4], e[4];
    for (int j = 0; j < 4; ++j) d[j] = V::sub(V::load(x + i + j * W), m);
    vexp_nonpos<4>(d, e);
    if (Store)
      for (int j = 0; j < 4; ++j) V::store(y + i + j * W, e[j]);
    acc0 = V::add(acc0, V::add(V::add(e[0], e[1]), V::add(e[2], e[3])));
  }
  for (; i + W <= n; i += W) {
    const R e = vexp_nonpos(V::sub(V::load(x + i), m));
    if (Store) V::store(y + i, e);
    acc0 = V::add(acc0, e);
  }
  if (i < n) {
    const R e = vexp_nonpos(V::sub(load_tail(x + i, n - i, -__builtin_inff()), m));
    if (Store) store_tail(y + i, e, n - i);
    acc1 = e;
  }
  return V::hsum(V::add(acc0, acc1));
}
float exp_sub_sum_k(const float* x, float mx, float* y, int64_t n) {
  return exp_sub_sum_rows<false, true>(x, mx, y, n);
}

// The row maximum for a softmax, without the NaN test per vector of max_k: x86's max returns its second operand
// when one is NaN, so a NaN entry is skipped here (NEON's max keeps it) and then makes the row's sum NaN, which
// fills the row with NaN all the same. Only a row of -inf and NaN alone needs the scan of special_row.
float row_max(const float* x, int64_t n) {
  R m = V::set(-__builtin_inff());
  int64_t i = 0;
  for (; i + W <= n; i += W) m = V::max(V::load(x + i), m);
  if (i < n) m = V::max(load_tail(x + i, n - i, -__builtin_inff()), m);
  return V::hmax(m);
}

// Fills a row whose maximum is NaN or -inf (with NaN if the row has one); false if the row is ordinary.
bool special_row(const float* x, float m, float* y, int64_t n, float neg_inf_fill) {
  if (m == m && m != -__builtin_inff()) return false;
  bool nan = m != m;
  for (int64_t k = 0; k < n; ++k) nan = nan || x[k] != x[k];
  const float fill = nan ? __builtin_nanf("") : neg_inf_fill;
  for (int64_t k = 0; k < n; ++k) y[k] = fill;
  return true;
}

void softmax_row_k(const float* x, float* y, int64_t n) {
  const float mx = row_max(x, n);
  if (special_row(x, mx, y, n, 0.f)) return;
  const R inv = V::set(1.f / exp_sub_sum_rows<true, true>(x, mx, y, n));
  map1(y, y, n, [inv](R e) { return V::mul(e, inv); });
}
void log_softmax_row_k(const float* x, float* y, int64_t n) {
  const float mx = row_max(x, n);
  if (special_row(x, mx, y, n, -__builtin_inff())) return;
  const R m = V::set(mx);
  const R lt = vlog(V::set(exp_sub_sum_rows<true, false>(x, mx, y, n)));
  // (x - m) first: adding log(total) to a large m would round it away
  map1(x, y, n, [m, lt](R v) { return V::sub(V::sub(v, m), lt); });
}
void softmax_backward_row_k(const float* y, const float* g, float* dx, int64_t n) {
  const R t = V::set(dot_k(g, y, n));
  map2(y, g, dx, n, [t](R yi, R gi) { return V::mul(yi, V::sub(gi, t)); });
}
void log_softmax_backward_row_k(const float* y, const float* g, float* dx, int64_t n) {
  const R t = V::set(sum_k(g, n));
  map2(y, g, dx, n, [t](R yi, R gi) { return V::fnma(vexp(yi), t, gi); });
}

void norm_row_k(const float* x, const float* w, const float* b, float* y, int64_t c, float eps, float* mean,
                float* rstd) {
  const float mu = mean ? sum_k(x, c) / float(c) : 0.f;
  const R m = V::set(mu);
  const float var =
      reduce_sum(x, x, c, mu, 0.f, [m](R a, R) { return V::mul(V::sub(a, m), V::sub(a, m)); }) / float(c);
  const float rs = V::first(V::div(V::set(1.f), V::sqrt(V::set(var + eps))));
  const R r = V::set(rs);
  int64_t i = 0;
  for (; i < c; i += W) {
    const int64_t k = c - i < W ? c - i : W;
    R v = V::mul(V::sub(k == W ? V::load(x + i) : load_tail(x + i, k, 0.f), m), r);
    if (w) v = V::mul(v, k == W ? V::load(w + i) : load_tail(w + i, k, 0.f));
    if (b) v = V::add(v, k == W ? V::load(b + i) : load_tail(b + i, k, 0.f));
    if (k == W)
      V::store(y + i, v);
    else
      store_tail(y + i, v, k);
  }
  if (mean) *mean = mu;
  *rstd = rs;
}

void norm_backward_row_k(const float* x, const float* w, const float* mean, float rstd, const float* g, float* dx,
                         float* dw, float* db, int64_t c) {
  const float mu = mean ? *mean : 0.f;
  const R m = V::set(mu), r = V::set(rstd);
  R s_dn = V::set(0.f), s_dnx = V::set(0.f);
  for (int64_t i = 0; i < c; i += W) {
    const int64_t k = c - i < W ? c - i : W;
    const R gi = k == W ? V::load(g + i) : load_tail(g + i, k, 0.f);
    const R dn = w ? V::mul(gi, k == W ? V::load(w + i) : load_tail(w + i, k, 0.f)) : gi;
    const R xh = V::mul(V::sub(k == W ? V::load(x + i) : load_tail(x + i, k, 0.f), m), r);
    s_dn = V::add(s_dn, dn);
    s_dnx = V::fma(dn, xh, s_dnx);
  }
  const R dn_mean = V::set(mean ? V::hsum(s_dn) / float(c) : 0.f);
  const R dnx_mean = V::set(V::hsum(s_dnx) / float(c));
  // The second pass writes dx and, while g and xhat are in registers, adds the parameter gradients.
  int64_t i = 0;
  for (; i + W <= c; i += W) {
    const R gi = V::load(g + i);
    const R dn = w ? V::mul(gi, V::load(w + i)) : gi;
    const R xh = V::mul(V::sub(V::load(x + i), m), r);
    V::store(dx + i, V::mul(r, V::fnma(xh, dnx_mean, V::sub(dn, dn_mean))));
    if (dw) V::store(dw + i, V::fma(gi, xh, V::load(dw + i)));
    if (db) V::store(db + i, V::add(V::load(db + i), gi));
  }
  if (i == c) return;
  const int64_t k = c - i;
  const R gi = load_tail(g + i, k, 0.f);
  const R dn = w ? V::mul(gi, load_tail(w + i, k, 0.f)) : gi;
  const R xh = V::mul(V::sub(load_tail(x + i, k, 0.f), m), r);
  store_tail(dx + i, V::mul(r, V::fnma(xh, dnx_mean, V::sub(dn, dn_mean))), k);
  for (; i < c; ++i) {  // unfused, as the reference
    if (dw) dw[i] += g[i] * ((x[i] - mu) * rstd);
    if (db) db[i] += g[i];
  }
}

float cross_entropy_row_k(const float* x, int64_t c, int64_t t, float on, float uniform, float* lse) {
  const float mx = max_k(x, c);
  const float s = exp_sub_sum_rows<false, false>(x, mx, nullptr, c);
  const float l = mx + V::first(vlog(V::set(s)));
  *lse = l;
  return l - on * x[t] - uniform * (uniform != 0.f ? sum_k(x, c) : 0.f);
}
void cross_entropy_backward_row_k(const float* x, int64_t c, int64_t t, float lse, float on, float uniform,
                                  float scale, float* gx) {
  const R l = V::set(lse), u = V::set(uniform), sc = V::set(scale);
  auto grad4 = [l, u, sc](const R* v, R* g) {
    R d[4];
    for (int j = 0; j < 4; ++j) d[j] = V::sub(v[j], l);
    vexp<4>(d, g);
    for (int j = 0; j < 4; ++j) g[j] = V::mul(V::sub(g[j], u), sc);
  };
  map1_x4(x, gx, c, grad4, [l, u, sc](R v) { return V::mul(V::sub(vexp(V::sub(v, l)), u), sc); });
  gx[t] -= on * scale;
}
// The row's max pass reads it from memory; the exponentials, written into gx, then prefetch the next row of x and of
// gx (the rows of a loss are consecutive), so that memory keeps streaming while the row computes; the scaling pass
// runs on gx in L1.
float cross_entropy_grad_row_k(const float* x, int64_t c, int64_t t, double scale, float b, float on_scale, float* gx,
                               float* mx) {
  *mx = max_k(x, c);
  const float s = exp_sub_sum_rows<true, true>(x, *mx, gx, c);
  const R a = V::set(float(scale / double(s))), nb = V::set(-b);
  map1(gx, gx, c, [a, nb](R e) { return V::fma(e, a, nb); });
  gx[t] -= on_scale;
  return s;
}

void adam_k(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s) {
  const R decay = V::set(s.decay), l2 = V::set(s.l2), b1 = V::set(s.b1), b2 = V::set(s.b2);
  const R c1 = V::set(1 - s.b1), c2 = V::set(1 - s.b2), step = V::set(s.step), vscale = V::set(s.vscale),
          eps = V::set(s.eps);
  const bool adaptive = s.adaptive;
  auto one = [&](float* pp, const float* gp, float* mp, float* vp, int64_t k) {
    const bool full = k == W;
    R pk = V::mul(full ? V::load(pp) : load_tail(pp, k, 0.f), decay);
    const R gk = V::fma(l2, pk, full ? V::load(gp) : load_tail(gp, k, 0.f));
    const R mk = V::fma(b1, full ? V::load(mp) : load_tail(mp, k, 0.f), V::mul(c1, gk));
    const R vk = V::fma(b2, full ? V::load(vp) : load_tail(vp, k, 0.f), V::mul(V::mul(c2, gk), gk));
    const R upd = adaptive ? V::div(mk, V::fma(V::sqrt(vk), vscale, eps)) : mk;
    pk = V::fnma(step, upd, pk);
    if (full) {
      V::store(pp, pk);
      V::store(mp, mk);
      V::store(vp, vk);
    } else {
      store_tail(pp, pk, k);
      store_tail(mp, mk, k);
      store_tail(vp, vk, k);
    }
  };
  int64_t i = 0;
  for (; i + W <= n; i += W) one(p + i, g + i, m + i, v + i, W);
  if (i < n) one(p + i, g + i, m + i, v + i, n - i);
}

// Filled field by field, by name (see make_scalar_table in engine/vec_kernels_scalar.cpp); constexpr, so the table
// is constant-initialised and ready before any static initialiser of another file asks for it.
constexpr VecKernels make_simd_table() {
  VecKernels k{};
  k.name = ENG_VEC_NAME;
  k.exp = exp_k;
  k.log = log_k;
  k.tanh = tanh_k;
  k.sigmoid = sigmoid_k;
  k.silu = silu_k;
  k.gelu_tanh = gelu_tanh_k;
  k.gelu_erf = gelu_erf_k;
  k.elu = elu_k;
  k.elu_plus_one = elu_plus_one_k;
  k.gelu_tanh_backward = ENG_VEC_TRAINING(gelu_tanh_backward_k);
  k.gelu_erf_backward = ENG_VEC_TRAINING(gelu_erf_backward_k);
  k.elu_backward = ENG_VEC_TRAINING(elu_backward_k);
  k.silu_backward = ENG_VEC_TRAINING(silu_backward_k);
  k.add = add_k;
  k.sub = sub_k;
  k.mul = mul_k;
  k.div = div_k;
  k.sum = sum_k;
  k.max = max_k;
  k.dot = dot_k;
  k.exp_sub_sum = exp_sub_sum_k;
  k.softmax_row = softmax_row_k;
  k.log_softmax_row = log_softmax_row_k;
  k.softmax_backward_row = ENG_VEC_TRAINING(softmax_backward_row_k);
  k.log_softmax_backward_row = ENG_VEC_TRAINING(log_softmax_backward_row_k);
  k.norm_row = norm_row_k;
  k.norm_backward_row = ENG_VEC_TRAINING(norm_backward_row_k);
  k.cross_entropy_row = ENG_VEC_TRAINING(cross_entropy_row_k);
  k.cross_entropy_backward_row = ENG_VEC_TRAINING(cross_entropy_backward_row_k);
  k.cross_entropy_grad_row = ENG_VEC_TRAINING(cross_entropy_grad_row_k);
  k.adam = ENG_VEC_TRAINING(adam_k);
  return k;
}

constexpr VecKernels simd_table = make_simd_table();

}  // namespace
}  // namespace eng
