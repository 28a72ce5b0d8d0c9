#include "ops/aft.h"

#include <limits>
#include <memory>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"

namespace eng {

ENG_REGISTER_OP("aft_weighted");

namespace {

// What the backward needs, per (b, h, t, d): the output, the denominator, the maximum m_t it is relative to, and
// e^{K_t − m_t}.
struct AftSaved {
  int64_t B = 0, H = 0, T = 0, D = 0, S = 0;
  AftArgs args;
  std::vector<double> k, v, w, y, den, m, ek;

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

// One (b, h): rows t outer, features d inner (contiguous). The unbiased sums run through aft_absorb, in the order
// aft-simple's step() repeats; each band key adds (e^w − 1) e^{K_t2 − m_t} with e^w − 1 computed once per (t, off).
void forward_rows(AftSaved& P, int64_t b, int64_t h) {
  const int64_t len = P.key_end(b), D = P.D;
  if (len == 0) return;  // no key: the rows stay 0 (y and den were zero-filled)
  std::vector<double> m(size_t(D), -std::numeric_limits<double>::infinity()), num(size_t(D), 0.0),
      den(size_t(D), 0.0), n(static_cast<size_t>(D)), z(static_cast<size_t>(D));
  auto absorb = [&](int64_t t) {
    const size_t r = P.at(b, h, t, 0);
    for (int64_t d = 0; d < D; ++d) aft_absorb(m[size_t(d)], num[size_t(d)], den[size_t(d)], P.k[r + size_t(d)],
                                               P.v[r + size_t(d)]);
  };
  if (!P.args.causal) {
    for (int64_t t2 = 0; t2 < len; ++t2) absorb(t2);
    for (int64_t t2 = 0; t2 < len; ++t2)
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = P.at(b, h, t2, d);
        P.ek[i] = std::exp(P.k[i] - m[size_t(d)]);
      }
  }
  for (int64_t t = 0; t < P.T; ++t) {
    const size_t r = P.at(b, h, t, 0);
    if (P.args.causal && t < len) {
      absorb(t);
      for (int64_t d = 0; d < D; ++d) P.ek[r + size_t(d)] = std::exp(P.k[r + size_t(d)] - m[size_t(d)]);
    }
    for (int64_t d = 0; d < D; ++d) P.m[r + size_t(d)] = m[size_t(d)];  // before the band, which may read row t
    n = num, z = den;
    for (int64_t off = P.args.lo; off <= P.args.hi; ++off) {
      const int64_t t2 = t + off;
      if (!P.band_key(t, t2, len)) continue;
      const double ew1 = std::expm1(P.w[P.w_at(h, t, off)]);
      const size_t r2 = P.at(b, h, t2, 0);
      for (int64_t d = 0; d < D; ++d) {
        const double f = P.args.causal ? aft_rescale(P.m[r2 + size_t(d)], m[size_t(d)]) : 1.0;  // non-causal: one m
        const double c = ew1 * P.ek[r2 + size_t(d)] * f;
        n[size_t(d)] += c * P.v[r2 + size_t(d)];
        z[size_t(d)] += c;
      }
    }
    for (int64_t d = 0; d < D; ++d) {
      P.y[r + size_t(d)] = n[size_t(d)] / z[size_t(d)];
      P.den[r + size_t(d)] = z[size_t(d)];
    }
  }
}

// Gradients of Σ g ⊙ out for one (b, h): through out_t = n_t / z_t, ∂/∂n_t = g/z = α_t and ∂/∂z_t = −g·out/z = −β_t
// (both in units of e^{m_t}, as n and z are). dk, dv are this (b, h)'s rows; dw its own partial sum.
void backward_rows(const AftSaved& P, int64_t b, int64_t h, const std::vector<double>& g, std::vector<double>& dk,
                   std::vector<double>& dv, double* dw) {
  const int64_t len = P.key_end(b), D = P.D, T = P.T;
  if (len == 0) return;
  std::vector<double> alpha(size_t(T * D)), beta(size_t(T * D)), ra(size_t(D), 0.0), rb(size_t(D), 0.0);
  const size_t base = P.at(b, h, 0, 0);
  for (size_t e = 0; e < size_t(T * D); ++e) {
    alpha[e] = g[base + e] / P.den[base + e];
    beta[e] = g[base + e] * P.y[base + e] / P.den[base + e];
  }
  // Unbiased part: key t2 reaches every row t that sees it with weight e^{K_t2 − m_t}.
  auto key_grad = [&](int64_t t2) {
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = base + size_t(t2 * D + d);
      dv[i] += P.ek[i] * ra[size_t(d)];
      dk[i] += P.ek[i] * (ra[size_t(d)] * P.v[i] - rb[size_t(d)]);
    }
  };
  if (!P.args.causal) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) ra[size_t(d)] += alpha[size_t(t * D + d)], rb[size_t(d)] += beta[size_t(t * D + d)];
    for (int64_t t2 = 0; t2 < len; ++t2) key_grad(t2);
  } else {
    // Suffix sums R_t2 = Σ_{t >= t2} α_t e^{m_t2 − m_t}, by R_t2 = α_t2 + e^{m_t2 − m_{t2+1}} R_{t2+1}: the
    // running maximum never decreases, so every factor is <= 1 and nothing overflows.
    for (int64_t t2 = T - 1; t2 >= 0; --t2) {
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = base + size_t(t2 * D + d), e = size_t(t2 * D + d);
        if (t2 + 1 < T) {
          const double f = aft_rescale(P.m[i], P.m[i + size_t(D)]);
          ra[size_t(d)] *= f, rb[size_t(d)] *= f;
        }
        ra[size_t(d)] += alpha[e], rb[size_t(d)] += beta[e];
      }
      if (t2 < len) key_grad(t2);
    }
  }
  // Band correction: (e^w − 1) e^{K_t2 − m_t} for each key of row t's band.
  for (int64_t t = 0; t < T; ++t)
    for (int64_t off = P.args.lo; off <= P.args.hi; ++off) {
      const int64_t t2 = t + off;
      if (!P.band_key(t, t2, len)) continue;
      const size_t wi = P.w_at(h, t, off);
      const double ew1 = std::expm1(P.w[wi]);
      double dwi = 0;
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = base + size_t(t2 * D + d), r = size_t(t * D + d);
        const double e = P.ek[i] * aft_rescale(P.m[i], P.m[base + r]);
        const double u = alpha[r] * P.v[i] - beta[r];
        dv[i] += alpha[r] * ew1 * e;
        dk[i] += ew1 * e * u;
        dwi += e * u;
      }
      dw[wi] += std::exp(P.w[wi]) * dwi;
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
  P->ek.assign(n, 0.0);
  parallel_for(0, P->B * P->H, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t bh = lo; bh < hi; ++bh) forward_rows(*P, bh / P->H, bh % P->H);
  });
  Tensor out = from_vector(P->y, k.shape(), k.dtype());
  std::vector<Tensor> inputs{k, v};
  if (band) inputs.push_back(w);
  const Shape w_shape = band ? w.shape() : Shape{};
  return record(out, "aft_weighted", inputs, [P, band, w_shape, dtype = k.dtype()](const Tensor& g) {
    const int64_t BH = P->B * P->H;
    const size_t nw = P->w.size();
    const std::vector<double> gv = g.to_vector();
    // Each (b, h) sums into its own copy of dw; the copies are added in (b, h) order, so the result does not
    // depend on the thread count.
    std::vector<double> dk(P->k.size(), 0.0), dv(P->k.size(), 0.0), dw_parts(size_t(BH) * nw, 0.0), dw(nw, 0.0);
    parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t bh = lo; bh < hi; ++bh)
        backward_rows(*P, bh / P->H, bh % P->H, gv, dk, dv, dw_parts.data() + size_t(bh) * nw);  // nw may be 0
    });
    for (int64_t bh = 0; bh < BH; ++bh)
      for (size_t e = 0; e < nw; ++e) dw[e] += dw_parts[size_t(bh) * nw + e];
    const Shape shape{P->B, P->H, P->T, P->D};
    std::vector<Tensor> grads{from_vector(dk, shape, dtype), from_vector(dv, shape, dtype)};
    if (band) grads.push_back(from_vector(dw, w_shape, dtype));
    return grads;
  });
}

}  // namespace eng
