#include "ops/aft.h"

#include <limits>
#include <memory>

#include "engine/autograd.h"
#include "engine/error.h"

namespace eng {

ENG_REGISTER_OP("aft_weighted");

namespace {

// What the backward needs, per (b, h, t, d): the output, the denominator and the maximum m_t it is relative to.
struct AftSaved {
  int64_t B = 0, H = 0, T = 0, D = 0, S = 0;
  AftArgs args;
  std::vector<double> k, v, w, y, den, m;

  size_t at(int64_t b, int64_t h, int64_t t, int64_t d) const { return size_t(((b * H + h) * T + t) * D + d); }
  int64_t key_end(int64_t b) const { return args.key_lengths.empty() ? T : args.key_lengths[size_t(b)]; }
  size_t w_at(int64_t h, int64_t t, int64_t off) const {
    return size_t((args.per_head ? h : t) * S + off - args.lo);
  }
  // Key t2 is in row t's band and visible to it.
  bool band_key(int64_t t, int64_t t2, int64_t len) const {
    return t2 >= 0 && t2 < len && (!args.causal || t2 <= t);
  }
};

void forward_kernel(AftSaved& P) {
  for (int64_t b = 0; b < P.B; ++b) {
    const int64_t len = P.key_end(b);
    for (int64_t h = 0; h < P.H; ++h)
      for (int64_t d = 0; d < P.D; ++d) {
        if (len == 0) continue;  // no key: the row stays 0 (y and den were zero-filled)
        double m = -std::numeric_limits<double>::infinity(), num = 0, den = 0;
        if (!P.args.causal)
          for (int64_t t2 = 0; t2 < len; ++t2) aft_absorb(m, num, den, P.k[P.at(b, h, t2, d)], P.v[P.at(b, h, t2, d)]);
        for (int64_t t = 0; t < P.T; ++t) {
          if (P.args.causal && t < len) aft_absorb(m, num, den, P.k[P.at(b, h, t, d)], P.v[P.at(b, h, t, d)]);
          double n = num, z = den;
          for (int64_t off = P.args.lo; off <= P.args.hi; ++off) {
            const int64_t t2 = t + off;
            if (!P.band_key(t, t2, len)) continue;
            const double c = std::expm1(P.w[P.w_at(h, t, off)]) * std::exp(P.k[P.at(b, h, t2, d)] - m);
            n += c * P.v[P.at(b, h, t2, d)];
            z += c;
          }
          const size_t i = P.at(b, h, t, d);
          P.y[i] = n / z;
          P.den[i] = z;
          P.m[i] = m;
        }
      }
  }
}

// Gradients of Σ g ⊙ out: through out_t = n_t / z_t, ∂/∂n_t = g/z = α_t and ∂/∂z_t = −g·out/z = −β_t (both in units
// of e^{m_t}, as n and z are).
void backward_kernel(const AftSaved& P, const std::vector<double>& g, std::vector<double>& dk,
                     std::vector<double>& dv, std::vector<double>& dw) {
  std::vector<double> alpha(size_t(P.T)), beta(size_t(P.T));
  for (int64_t b = 0; b < P.B; ++b) {
    const int64_t len = P.key_end(b);
    if (len == 0) continue;
    for (int64_t h = 0; h < P.H; ++h)
      for (int64_t d = 0; d < P.D; ++d) {
        for (int64_t t = 0; t < P.T; ++t) {
          const size_t i = P.at(b, h, t, d);
          alpha[size_t(t)] = g[i] / P.den[i];
          beta[size_t(t)] = g[i] * P.y[i] / P.den[i];
        }
        // Unbiased part: key t2 reaches every row t that sees it with weight e^{K_t2 − m_t}.
        double ra = 0, rb = 0;
        if (!P.args.causal) {
          for (int64_t t = 0; t < P.T; ++t) ra += alpha[size_t(t)], rb += beta[size_t(t)];
          for (int64_t t2 = 0; t2 < len; ++t2) {
            const size_t i = P.at(b, h, t2, d);
            const double e = std::exp(P.k[i] - P.m[i]);
            dv[i] += e * ra;
            dk[i] += e * (ra * P.v[i] - rb);
          }
        } else {
          // Suffix sums R_t2 = Σ_{t >= t2} α_t e^{m_t2 − m_t}, by R_t2 = α_t2 + e^{m_t2 − m_{t2+1}} R_{t2+1}: the
          // running maximum never decreases, so every factor is <= 1 and nothing overflows.
          for (int64_t t2 = P.T - 1; t2 >= 0; --t2) {
            const size_t i = P.at(b, h, t2, d);
            if (t2 + 1 < P.T) {
              const double f = std::exp(P.m[i] - P.m[P.at(b, h, t2 + 1, d)]);
              ra *= f, rb *= f;
            }
            ra += alpha[size_t(t2)], rb += beta[size_t(t2)];
            if (t2 >= len) continue;
            const double e = std::exp(P.k[i] - P.m[i]);
            dv[i] += e * ra;
            dk[i] += e * (ra * P.v[i] - rb);
          }
        }
        // Band correction: (e^w − 1) e^{K − m_t} for each key of row t's band.
        for (int64_t t = 0; t < P.T; ++t)
          for (int64_t off = P.args.lo; off <= P.args.hi; ++off) {
            const int64_t t2 = t + off;
            if (!P.band_key(t, t2, len)) continue;
            const size_t i = P.at(b, h, t2, d), wi = P.w_at(h, t, off);
            const double e = std::exp(P.k[i] - P.m[P.at(b, h, t, d)]);
            const double c = std::expm1(P.w[wi]) * e, u = alpha[size_t(t)] * P.v[i] - beta[size_t(t)];
            dv[i] += alpha[size_t(t)] * c;
            dk[i] += c * u;
            dw[wi] += std::exp(P.w[wi]) * e * u;
          }
      }
  }
}

}  // namespace

Tensor aft_weighted(const Tensor& k, const Tensor& v, const Tensor& w, const AftArgs& args) {
  ENG_CHECK(k.dim() == 4 && k.shape() == v.shape(), "aft_weighted: k and v must be [B, H, T, D] of one shape, got k ",
            k.shape(), ", v ", v.shape());
  ENG_CHECK(k.dtype() == v.dtype() && (k.dtype() == DType::F32 || k.dtype() == DType::F64),
            "aft_weighted: k and v must share a float dtype");
  auto P = std::make_shared<AftSaved>();
  P->B = k.size(0), P->H = k.size(1), P->T = k.size(2), P->D = k.size(3);
  P->args = args;
  const bool band = args.hi >= args.lo;
  P->S = band ? args.hi - args.lo + 1 : 0;
  ENG_CHECK(args.key_lengths.empty() || int64_t(args.key_lengths.size()) == P->B, "aft_weighted: ",
            args.key_lengths.size(), " key_lengths for batch ", P->B);
  for (int64_t len : args.key_lengths)
    ENG_CHECK(len >= 0 && len <= P->T, "aft_weighted: key length ", len, " is outside [0, ", P->T, "]");
  if (band) {
    ENG_CHECK(w.defined() && w.dim() == 2 && w.size(1) == P->S && w.dtype() == k.dtype() &&
                  (args.per_head ? w.size(0) == P->H : w.size(0) >= P->T),
              "aft_weighted: w must be [", args.per_head ? "H" : "R >= T", ", ", P->S, "] of k's dtype for k ",
              k.shape(), " and offsets [", args.lo, ", ", args.hi, "], got ", w.defined() ? w.shape() : Shape{});
    P->w = w.to_vector();
  } else {
    ENG_CHECK(!w.defined(), "aft_weighted: w given with an empty band of offsets [", args.lo, ", ", args.hi, "]");
  }
  P->k = k.to_vector();
  P->v = v.to_vector();
  const size_t n = P->k.size();
  P->y.assign(n, 0.0);
  P->den.assign(n, 0.0);
  P->m.assign(n, 0.0);
  forward_kernel(*P);
  Tensor out = from_vector(P->y, k.shape(), k.dtype());
  std::vector<Tensor> inputs{k, v};
  if (band) inputs.push_back(w);
  const Shape w_shape = band ? w.shape() : Shape{};
  return record(out, "aft_weighted", inputs, [P, band, w_shape, dtype = k.dtype()](const Tensor& g) {
    std::vector<double> dk(P->k.size(), 0.0), dv(P->k.size(), 0.0), dw(P->w.size(), 0.0);
    backward_kernel(*P, g.to_vector(), dk, dv, dw);
    const Shape shape{P->B, P->H, P->T, P->D};
    std::vector<Tensor> grads{from_vector(dk, shape, dtype), from_vector(dv, shape, dtype)};
    if (band) grads.push_back(from_vector(dw, w_shape, dtype));
    return grads;
  });
}

}  // namespace eng
