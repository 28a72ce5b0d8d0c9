#include "ops/adaptive_span_attention.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "ops/attention_rows.h"
#include "ops/kernel_util.h"

namespace eng {

ENG_REGISTER_OP("adaptive_span_attention");

namespace {

constexpr int64_t kBlockQ = 64, kBlockK = 64;  // a tile of logits is kBlockQ x kBlockK, row stride kBlockK

// The problem both kernels share: operands, sizes, the mask, and per head the reach and the mask by distance.
template <class T>
struct Span {
  int64_t B = 0, H = 0, Lq = 0, Lk = 0, D = 0, Dv = 0;
  T scale = 1;
  double ramp = 1;
  Rows<T> q, k, v;
  const AttentionMask* mask = nullptr;
  std::vector<double> z;            // [H]
  std::vector<int64_t> reach;       // [H]: the largest distance with m > 0, -1 for none
  std::vector<std::vector<T>> m;    // [H][reach + 1]: m_z(x)
  std::vector<std::vector<T>> dlog; // [H][reach + 1]: m · ∂log m/∂z = 1/R strictly inside the ramp, else 0

  int64_t distance(int64_t i, int64_t j) const { return std::abs(i + mask->query_offset - j); }

  // Keys [lo, hi) of row i that are visible (causality, padding) and within the reach: exactly those with m > 0.
  void window(int64_t b, int64_t h, int64_t i, int64_t& lo, int64_t& hi) const {
    const int64_t p = i + mask->query_offset, r = reach[size_t(h)];
    lo = std::max<int64_t>(0, p - r);
    hi = r < 0 ? lo : std::max(lo, std::min(attention_key_end(*mask, b, i, Lk), p + r + 1));
  }
};

template <class T>
Span<T> make_span(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& z,
                  const AttentionMask& mask, double scale, double ramp) {
  Span<T> S;
  S.B = q.size(0), S.H = q.size(1), S.Lq = q.size(2), S.Lk = k.size(2), S.D = q.size(3), S.Dv = v.size(3);
  S.scale = T(scale), S.ramp = ramp;
  S.q = rows_of<T>(q), S.k = rows_of<T>(k), S.v = rows_of<T>(v);
  S.mask = &mask;
  S.z = z;
  // No distance exceeds this, so a huge z costs what full attention costs and nothing more.
  const int64_t cap = S.Lq + S.Lk + std::abs(mask.query_offset);
  for (int64_t h = 0; h < S.H; ++h) {
    const int64_t r = adaptive_span_reach(z[size_t(h)], ramp, cap);
    S.reach.push_back(r);
    std::vector<T> mh, dh;
    for (int64_t x = 0; x <= r; ++x) {
      const double mx = adaptive_span_mask(double(x), z[size_t(h)], ramp);
      mh.push_back(T(mx));
      dh.push_back(mx > 0 && mx < 1 ? T(1 / ramp) : T(0));
    }
    S.m.push_back(std::move(mh));
    S.dlog.push_back(std::move(dh));
  }
  return S;
}

// The keys [jlo, jhi) that some row of the block i0 .. i0+nq sees, with each row's window in lo, hi.
template <class T>
void block_windows(const Span<T>& S, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t* lo, int64_t* hi,
                   int64_t& jlo, int64_t& jhi) {
  jlo = std::numeric_limits<int64_t>::max(), jhi = 0;
  for (int64_t i = 0; i < nq; ++i) {
    S.window(b, h, i0 + i, lo[i], hi[i]);
    if (lo[i] < hi[i]) jlo = std::min(jlo, lo[i]), jhi = std::max(jhi, hi[i]);
  }
  if (jhi == 0) jlo = 0;
}

// ---- the tiled kernel ----

// out [B, H, Lq, Dv] and lse [B, H, Lq] (contiguous), one task per (batch, head, query block): online softmax over
// the key tiles of the block's windows, each weight m · e^{s - running max}.
template <class T>
void forward_tiled(const Span<T>& S, T* out, T* lse) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t nqb = (S.Lq + kBlockQ - 1) / kBlockQ, Dv = S.Dv;
  parallel_for(0, S.B * S.H * nqb, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> s(size_t(kBlockQ * kBlockK)), mx(kBlockQ), l(kBlockQ);
    std::vector<int64_t> lo(kBlockQ), hi(kBlockQ);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / nqb, b = bh / S.H, h = bh % S.H;
      const int64_t i0 = t % nqb * kBlockQ, nq = std::min(kBlockQ, S.Lq - i0);
      const T* mtab = S.m[size_t(h)].data();
      T* o = out + (bh * S.Lq + i0) * Dv;  // accumulates the unnormalised output
      std::fill(o, o + nq * Dv, T(0));
      std::fill(mx.begin(), mx.end(), neg_inf);
      std::fill(l.begin(), l.end(), T(0));
      int64_t jlo = 0, jhi = 0;
      block_windows(S, b, h, i0, nq, lo.data(), hi.data(), jlo, jhi);
      for (int64_t j0 = jlo; j0 < jhi; j0 += kBlockK) {
        const int64_t nk = std::min(kBlockK, jhi - j0);
        tile_product<T>(nq, nk, S.D, S.q.at(b, h, i0), S.q.sl, 1, S.k.at(b, h, j0), 1, S.k.sl, s.data(), kBlockK,
                        false);
        for (int64_t i = 0; i < nq; ++i) {  // the tile row becomes m · exp(s - new max), 0 outside the window
          T* row = s.data() + i * kBlockK;
          const int64_t a = std::max(lo[size_t(i)], j0) - j0, e = std::min(hi[size_t(i)], j0 + nk) - j0;
          T m_new = mx[size_t(i)];
          for (int64_t j = a; j < e; ++j) {  // NaN-first, so that a NaN logit makes the row NaN
            const T x = row[j] * S.scale;
            if (x > m_new || std::isnan(x)) m_new = x;
          }
          if (a >= e || m_new == neg_inf) {
            std::fill(row, row + nk, T(0));
            continue;
          }
          const T alpha = std::exp(mx[size_t(i)] - m_new);
          T sum = 0;
          for (int64_t j = 0; j < nk; ++j) {
            T p = 0;
            if (j >= a && j < e) p = mtab[S.distance(i0 + i, j0 + j)] * std::exp(row[j] * S.scale - m_new);
            row[j] = p;
            sum += p;
          }
          l[size_t(i)] = l[size_t(i)] * alpha + sum;
          mx[size_t(i)] = m_new;
          if (alpha != T(1))
            for (int64_t c = 0; c < Dv; ++c) o[i * Dv + c] *= alpha;
        }
        tile_product<T>(nq, Dv, nk, s.data(), kBlockK, 1, S.v.at(b, h, j0), S.v.sl, 1, o, Dv, true);
      }
      finish_softmax_rows(nq, Dv, l, mx, o, lse + bh * S.Lq + i0);
    }
  });
}

// The gradients the backward adds into (contiguous) and what it reads.
template <class T>
struct Grads {
  const T* dout;  // [B, H, Lq, Dv]
  const T* out;   // [B, H, Lq, Dv]
  const T* lse;   // [B, H, Lq]
  T *dq, *dk, *dv;
  double* dz;  // [B, H]: summed over the batch afterwards
};

// One task per (batch, head), its query blocks in order and each block's key tiles in order, so dK and dV rows
// are only written by their head's task: no races, and the same sums for any thread count.
template <class T>
void backward_tiled(const Span<T>& S, const Grads<T>& G) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t D = S.D, Dv = S.Dv;
  parallel_for(0, S.B * S.H, 1, [&](int64_t t0, int64_t t1) {
    const size_t tile = size_t(kBlockQ * kBlockK);
    std::vector<T> p(tile), ez(tile), dp(tile), delta(kBlockQ);
    std::vector<int64_t> lo(kBlockQ), hi(kBlockQ);
    for (int64_t bh = t0; bh < t1; ++bh) {
      const int64_t b = bh / S.H, h = bh % S.H;
      const T* mtab = S.m[size_t(h)].data();
      const T* dtab = S.dlog[size_t(h)].data();
      double dz = 0;
      for (int64_t i0 = 0; i0 < S.Lq; i0 += kBlockQ) {
        const int64_t nq = std::min(kBlockQ, S.Lq - i0);
        const T* go = G.dout + (bh * S.Lq + i0) * Dv;
        const T* L = G.lse + bh * S.Lq + i0;
        for (int64_t i = 0; i < nq; ++i) {  // D_i = dO_i · O_i
          T acc = 0;
          for (int64_t c = 0; c < Dv; ++c) acc += go[i * Dv + c] * G.out[(bh * S.Lq + i0 + i) * Dv + c];
          delta[size_t(i)] = acc;
        }
        int64_t jlo = 0, jhi = 0;
        block_windows(S, b, h, i0, nq, lo.data(), hi.data(), jlo, jhi);
        for (int64_t j0 = jlo; j0 < jhi; j0 += kBlockK) {
          const int64_t nk = std::min(kBlockK, jhi - j0);
          tile_product<T>(nq, nk, D, S.q.at(b, h, i0), S.q.sl, 1, S.k.at(b, h, j0), 1, S.k.sl, p.data(), kBlockK,
                          false);
          for (int64_t i = 0; i < nq; ++i) {  // P = m e^{s - L}, and e^{s - L} ∂log m/∂z · m for dz
            const int64_t a = std::max(lo[size_t(i)], j0) - j0, e = std::min(hi[size_t(i)], j0 + nk) - j0;
            const bool none = L[i] == neg_inf;  // a row that saw no key has no gradient
            for (int64_t j = 0; j < nk; ++j) {
              const size_t at = size_t(i * kBlockK + j);
              if (none || j < a || j >= e) {
                p[at] = 0, ez[at] = 0;
                continue;
              }
              const int64_t x = S.distance(i0 + i, j0 + j);
              const T w = std::exp(p[at] * S.scale - L[i]);
              p[at] = mtab[x] * w;
              ez[at] = dtab[x] * w;
            }
          }
          tile_product<T>(nq, nk, Dv, go, Dv, 1, S.v.at(b, h, j0), 1, S.v.sl, dp.data(), kBlockK, false);
          for (int64_t i = 0; i < nq; ++i)
            for (int64_t j = 0; j < nk; ++j) {
              const size_t at = size_t(i * kBlockK + j);
              const T d = dp[at] - delta[size_t(i)];
              dz += double(ez[at] * d);
              dp[at] = p[at] * d * S.scale;  // the gradient of the raw product q·k
            }
          tile_product<T>(nk, Dv, nq, p.data(), 1, kBlockK, go, Dv, 1, G.dv + (bh * S.Lk + j0) * Dv, Dv, true);
          tile_product<T>(nk, D, nq, dp.data(), 1, kBlockK, S.q.at(b, h, i0), S.q.sl, 1, G.dk + (bh * S.Lk + j0) * D,
                          D, true);
          tile_product<T>(nq, D, nk, dp.data(), kBlockK, 1, S.k.at(b, h, j0), S.k.sl, 1, G.dq + (bh * S.Lq + i0) * D,
                          D, true);
        }
      }
      G.dz[bh] = dz;
    }
  });
}

// ---- the plain scalar reference: one query and one key at a time, in double ----

template <class T>
double dot(const T* a, const T* b, int64_t n) {
  double acc = 0;
  for (int64_t c = 0; c < n; ++c) acc += double(a[c]) * double(b[c]);
  return acc;
}

template <class T>
void forward_reference(const Span<T>& S, T* out, T* lse) {
  std::vector<double> acc(size_t(S.Dv));
  for (int64_t b = 0; b < S.B; ++b)
    for (int64_t h = 0; h < S.H; ++h)
      for (int64_t i = 0; i < S.Lq; ++i) {
        const int64_t row = (b * S.H + h) * S.Lq + i;
        int64_t lo = 0, hi = 0;
        S.window(b, h, i, lo, hi);
        double mx = -std::numeric_limits<double>::infinity(), l = 0;
        for (int64_t j = lo; j < hi; ++j) mx = std::max(mx, dot(S.q.at(b, h, i), S.k.at(b, h, j), S.D) * S.scale);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = lo; j < hi; ++j) {
          const double s = dot(S.q.at(b, h, i), S.k.at(b, h, j), S.D) * S.scale;
          const double p = adaptive_span_mask(double(S.distance(i, j)), S.z[size_t(h)], S.ramp) * std::exp(s - mx);
          l += p;
          for (int64_t c = 0; c < S.Dv; ++c) acc[size_t(c)] += p * S.v.at(b, h, j)[c];
        }
        for (int64_t c = 0; c < S.Dv; ++c) out[row * S.Dv + c] = l > 0 ? T(acc[size_t(c)] / l) : T(0);
        lse[row] = l > 0 ? T(mx + std::log(l)) : -std::numeric_limits<T>::infinity();
      }
}

template <class T>
void backward_reference(const Span<T>& S, const Grads<T>& G) {
  const int64_t D = S.D, Dv = S.Dv;
  for (int64_t b = 0; b < S.B; ++b)
    for (int64_t h = 0; h < S.H; ++h) {
      double dz = 0;
      for (int64_t i = 0; i < S.Lq; ++i) {
        const int64_t row = (b * S.H + h) * S.Lq + i;
        const T* go = G.dout + row * Dv;
        const double L = G.lse[row];
        int64_t lo = 0, hi = 0;
        S.window(b, h, i, lo, hi);
        if (L == -std::numeric_limits<double>::infinity()) continue;
        const double delta = dot(go, G.out + row * Dv, Dv);
        for (int64_t j = lo; j < hi; ++j) {
          const double s = dot(S.q.at(b, h, i), S.k.at(b, h, j), D) * S.scale;
          const double mz = adaptive_span_mask(double(S.distance(i, j)), S.z[size_t(h)], S.ramp);
          const double w = std::exp(s - L), p = mz * w;
          const double d = dot(go, S.v.at(b, h, j), Dv) - delta;
          if (mz > 0 && mz < 1) dz += w * d / S.ramp;
          const double ds = p * d * S.scale;
          for (int64_t c = 0; c < Dv; ++c) G.dv[((b * S.H + h) * S.Lk + j) * Dv + c] += T(p * go[c]);
          for (int64_t c = 0; c < D; ++c) {
            G.dq[row * D + c] += T(ds * S.k.at(b, h, j)[c]);
            G.dk[((b * S.H + h) * S.Lk + j) * D + c] += T(ds * S.q.at(b, h, i)[c]);
          }
        }
      }
      G.dz[b * S.H + h] = dz;
    }
}

}  // namespace

Tensor adaptive_span_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& z,
                               const AttentionMask& mask, double scale, double ramp, bool reference) {
  const char* op = "adaptive_span_attention";
  check_qkv(q, k, v, op);
  if (!is_floating(q.dtype())) fail_not_floating(op);
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), Dv = v.size(3);
  check_attention_mask(mask, B, H, Lq, Lk, q.dtype(), op);
  ENG_CHECK(!mask.keep.defined() && !mask.bias.defined() && !mask.alibi_slopes.defined(), op,
            ": keep, bias and ALiBi masks are not supported (only causal, query_offset and key_lengths)");
  ENG_CHECK(z.defined(), op, ": z (one span per head) is undefined");
  ENG_CHECK(z.dim() == 1 && z.size(0) == H && z.dtype() == q.dtype(), op, ": z must be [", H,
            "] (one span per head) of ", q.dtype(), " for q ", q.shape(), ", got ", z.shape(), " ", z.dtype());
  ENG_CHECK(ramp > 0 && std::isfinite(ramp), op, ": ramp must be > 0, got ", ramp);
  ENG_CHECK(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  const std::vector<double> zs = z.to_vector();
  for (size_t h = 0; h < zs.size(); ++h)
    ENG_CHECK(std::isfinite(zs[h]), op, ": z[", h, "] = ", zs[h], " is not finite");
  AttentionMask m;  // what the kernels read, kept by the backward
  m.causal = mask.causal, m.query_offset = mask.query_offset, m.key_lengths = mask.key_lengths;
  Tensor qd = rows_contiguous(q), kd = rows_contiguous(k), vd = rows_contiguous(v);
  Tensor out = empty({B, H, Lq, Dv}, q.dtype());
  Tensor lse = empty({B, H, Lq}, q.dtype());
  ENG_DISPATCH(q.dtype(), T, {
    const Span<T> S = make_span<T>(qd, kd, vd, zs, m, scale, ramp);
    if (reference)
      forward_reference(S, out.data<T>(), lse.data<T>());
    else
      forward_tiled(S, out.data<T>(), lse.data<T>());
  });
  return record(out, op, {q, k, v, z},
                [qd, kd, vd, zs, m, scale, ramp, reference, o = out.detach(), lse](const Tensor& grad) {
                  const int64_t B = qd.size(0), H = qd.size(1);
                  Tensor go = grad.contiguous();
                  Tensor dq = zeros(qd.shape(), o.dtype()), dk = zeros(kd.shape(), o.dtype());
                  Tensor dv = zeros(vd.shape(), o.dtype());
                  std::vector<double> dzb(size_t(B * H), 0.0), dz(size_t(H), 0.0);
                  ENG_DISPATCH(o.dtype(), T, {
                    const Span<T> S = make_span<T>(qd, kd, vd, zs, m, scale, ramp);
                    const Grads<T> G{go.data<T>(), o.data<T>(), lse.data<T>(), dq.data<T>(), dk.data<T>(),
                                     dv.data<T>(), dzb.data()};
                    if (reference)
                      backward_reference(S, G);
                    else
                      backward_tiled(S, G);
                  });
                  for (int64_t bh = 0; bh < B * H; ++bh) dz[size_t(bh % H)] += dzb[size_t(bh)];
                  return std::vector<Tensor>{dq, dk, dv, from_vector(dz, {H}, o.dtype())};
                });
}

}  // namespace eng
