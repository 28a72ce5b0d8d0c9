#include "ops/attention_flash.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "ops/attention_mask.h"
#include "ops/attention_rows.h"
#include "ops/cuda/dispatch.h"
#include "ops/kernel_util.h"
#include "ops/mixed_precision.h"
#include "ops/reduce.h"

namespace eng {

ENG_REGISTER_OP("flash_attention");

namespace {

constexpr int64_t kBlockQ = 64, kBlockK = 64;  // a tile of logits is kBlockQ x kBlockK, row stride kBlockK

// The problem both passes share: operands, sizes, the mask, and the logits of one tile.
template <class T>
struct Flash {
  int64_t B = 0, H = 0, Lq = 0, Lk = 0, D = 0, Dv = 0;
  T scale = 1;
  Rows<T> q, k, v;
  const AttentionMask* mask = nullptr;
  const T* keep = nullptr;  // with keep_st, broadcast strides over [B, H, Lq, Lk]
  const T* bias = nullptr;
  Shape keep_st, bias_st;
  std::vector<T> slopes;  // empty: no ALiBi
  GemmPrecision precision = GemmPrecision::F32;  // of every tile product, forward and backward

  // Every query of rows [.., i_last] sees no key at or after this (causality and padding).
  int64_t key_end(int64_t b, int64_t i_last) const { return attention_key_end(*mask, b, i_last, Lk); }

  // s (row stride kBlockK) = logits of queries i0 .. i0+nq against keys j0 .. j0+nk:
  // q.k * scale + bias - slope |i + query_offset - j|, or -inf where the key is hidden.
  void logits(T* s, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk) const {
    tile_product<T>(nq, nk, D, q.at(b, h, i0), q.sl, 1, k.at(b, h, j0), 1, k.sl, s, kBlockK, false, precision);
    const T neg_inf = -std::numeric_limits<T>::infinity();
    if (!bias && slopes.empty() && !keep) {  // the usual causal/padding case: a scale, then -inf past the end
      for (int64_t i = 0; i < nq; ++i) {
        T* row = s + i * kBlockK;
        const int64_t visible = std::clamp<int64_t>(key_end(b, i0 + i) - j0, 0, nk);
        for (int64_t j = 0; j < visible; ++j) row[j] *= scale;
        std::fill(row + visible, row + nk, neg_inf);
      }
      return;
    }
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t qi = i0 + i, end = key_end(b, qi);
      T* row = s + i * kBlockK;
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t kj = j0 + j;
        T x = row[j] * scale;
        if (bias) x += bias[b * bias_st[0] + h * bias_st[1] + qi * bias_st[2] + kj * bias_st[3]];
        if (!slopes.empty()) x -= slopes[size_t(h)] * T(std::abs(qi + mask->query_offset - kj));
        if (kj >= end || (keep && keep[b * keep_st[0] + h * keep_st[1] + qi * keep_st[2] + kj * keep_st[3]] == 0))
          x = neg_inf;
        row[j] = x;
      }
    }
  }
};

// `m` holds detached tensors: keep already converted to T. A bf16 precision applies to f32 only.
template <class T>
Flash<T> make_flash(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& m, double scale,
                    GemmPrecision precision) {
  Flash<T> F;
  if (std::is_same_v<T, float>) F.precision = precision;
  F.B = q.size(0), F.H = q.size(1), F.Lq = q.size(2), F.Lk = k.size(2), F.D = q.size(3), F.Dv = v.size(3);
  F.scale = T(scale);
  F.q = rows_of<T>(q), F.k = rows_of<T>(k), F.v = rows_of<T>(v);
  F.mask = &m;
  const Shape logits{F.B, F.H, F.Lq, F.Lk};
  if (m.keep.defined()) F.keep = m.keep.data<T>(), F.keep_st = broadcast_strides(m.keep, logits);
  if (m.bias.defined()) F.bias = m.bias.data<T>(), F.bias_st = broadcast_strides(m.bias, logits);
  if (m.alibi_slopes.defined())
    for (double s : m.alibi_slopes.to_vector()) F.slopes.push_back(T(s));
  return F;
}

// out [B, H, Lq, Dv] and lse [B, H, Lq] (contiguous), one task per (batch, head, query block).
template <class T>
void flash_forward(const Flash<T>& F, T* out, T* lse) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t nqb = (F.Lq + kBlockQ - 1) / kBlockQ, Dv = F.Dv;
  parallel_for(0, F.B * F.H * nqb, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> s(size_t(kBlockQ * kBlockK)), m(kBlockQ), l(kBlockQ);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bh = t / nqb, b = bh / F.H, h = bh % F.H;
      const int64_t i0 = t % nqb * kBlockQ, nq = std::min(kBlockQ, F.Lq - i0);
      T* o = out + (bh * F.Lq + i0) * Dv;  // accumulates the unnormalised output
      std::fill(o, o + nq * Dv, T(0));
      std::fill(m.begin(), m.end(), neg_inf);
      std::fill(l.begin(), l.end(), T(0));
      const int64_t kend = F.key_end(b, i0 + nq - 1);
      for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
        const int64_t nk = std::min(kBlockK, F.Lk - j0);
        F.logits(s.data(), b, h, i0, nq, j0, nk);
        for (int64_t i = 0; i < nq; ++i) {  // online softmax: the tile row becomes exp(s - m_new)
          T* row = s.data() + i * kBlockK;
          T mx = m[size_t(i)];
          const T row_max = row_maximum(row, nk);  // NaN-first, so that a NaN logit makes the row NaN
          if (row_max > mx || std::isnan(row_max)) mx = row_max;
          if (mx == neg_inf) {  // nothing visible yet in this row
            std::fill(row, row + nk, T(0));
            continue;
          }
          const T alpha = std::exp(m[size_t(i)] - mx);
          const T sum = exp_minus(row, mx, nk);
          l[size_t(i)] = l[size_t(i)] * alpha + sum;
          m[size_t(i)] = mx;
          if (alpha != T(1))
            for (int64_t e = 0; e < Dv; ++e) o[i * Dv + e] *= alpha;
        }
        tile_product<T>(nq, Dv, nk, s.data(), kBlockK, 1, F.v.at(b, h, j0), F.v.sl, 1, o, Dv, true, F.precision);
      }
      finish_softmax_rows(nq, Dv, l, m, o, lse + bh * F.Lq + i0);
    }
  });
}

// The backward of one tile and the gradients it adds into (contiguous; dbias [B, H, Lq, Lk] or null).
template <class T>
struct FlashBackward {
  const Flash<T>& F;
  const T* dout;   // [B, H, Lq, Dv]
  const T* lse;    // [B, H, Lq]
  const T* delta;  // [B, H, Lq]: D_i = rowsum(dO_i * O_i)
  T *dq, *dk, *dv, *dbias;

  // Recomputes P = exp(S - L) for the tile, then dS = P * (dP - D_i); adds dS K to dQ (with_q) and
  // P^T dO, dS^T Q to dV, dK (with_kv, which also writes dbias).
  void tile(T* s, T* dp, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk, bool with_q,
            bool with_kv) const {
    const int64_t bh = b * F.H + h, Lq = F.Lq, Lk = F.Lk, D = F.D, Dv = F.Dv;
    const T neg_inf = -std::numeric_limits<T>::infinity();
    const T* L = lse + bh * Lq + i0;
    const T* Di = delta + bh * Lq + i0;
    const T* go = dout + (bh * Lq + i0) * Dv;
    F.logits(s, b, h, i0, nq, j0, nk);
    for (int64_t i = 0; i < nq; ++i) {
      T* row = s + i * kBlockK;
      if (L[i] == neg_inf)
        std::fill(row, row + nk, T(0));
      else
        exp_minus(row, L[i], nk);
    }
    tile_product<T>(nq, nk, Dv, go, Dv, 1, F.v.at(b, h, j0), 1, F.v.sl, dp, kBlockK, false, F.precision);
    T* db = dbias && with_kv ? dbias + (bh * Lq + i0) * Lk + j0 : nullptr;
    for (int64_t i = 0; i < nq; ++i) {
      const T* p = s + i * kBlockK;
      T* d = dp + i * kBlockK;
      if (db)
        for (int64_t j = 0; j < nk; ++j) db[i * Lk + j] = p[j] * (d[j] - Di[i]);
      for (int64_t j = 0; j < nk; ++j) d[j] = p[j] * (d[j] - Di[i]) * F.scale;  // the gradient of the raw q.k
    }
    if (with_kv) {
      tile_product<T>(nk, Dv, nq, s, 1, kBlockK, go, Dv, 1, dv + (bh * Lk + j0) * Dv, Dv, true, F.precision);
      tile_product<T>(nk, D, nq, dp, 1, kBlockK, F.q.at(b, h, i0), F.q.sl, 1, dk + (bh * Lk + j0) * D, D, true,
                      F.precision);
    }
    if (with_q)
      tile_product<T>(nq, D, nk, dp, kBlockK, 1, F.k.at(b, h, j0), F.k.sl, 1, dq + (bh * Lq + i0) * D, D, true,
                      F.precision);
  }
};

// Each dQ row sums over key blocks in increasing order and each dK, dV row over query blocks in increasing
// order, in both schedules, so the result does not depend on the schedule (or the thread count).
template <class T>
void flash_backward(const FlashBackward<T>& W) {
  const Flash<T>& F = W.F;
  const int64_t BH = F.B * F.H, nqb = (F.Lq + kBlockQ - 1) / kBlockQ, nkb = (F.Lk + kBlockK - 1) / kBlockK;
  const size_t tile = size_t(kBlockQ * kBlockK);
  auto nq_at = [&](int64_t i0) { return std::min(kBlockQ, F.Lq - i0); };
  auto nk_at = [&](int64_t j0) { return std::min(kBlockK, F.Lk - j0); };
  auto visible = [&](int64_t b, int64_t i0, int64_t j0) { return j0 < F.key_end(b, i0 + nq_at(i0) - 1); };
  if (BH >= 4 * int64_t(num_threads())) {  // enough heads: one task per head does all three gradients
    parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
      std::vector<T> s(tile), dp(tile);
      for (int64_t bh = lo; bh < hi; ++bh)
        for (int64_t j0 = 0; j0 < F.Lk; j0 += kBlockK)
          for (int64_t i0 = 0; i0 < F.Lq; i0 += kBlockQ)
            if (visible(bh / F.H, i0, j0))
              W.tile(s.data(), dp.data(), bh / F.H, bh % F.H, i0, nq_at(i0), j0, nk_at(j0), true, true);
    });
    return;
  }
  // Few heads: dK, dV per key block, then dQ per query block, each pass recomputing its tiles.
  parallel_for(0, BH * nkb, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> s(tile), dp(tile);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bh = t / nkb, j0 = t % nkb * kBlockK;
      for (int64_t i0 = 0; i0 < F.Lq; i0 += kBlockQ)
        if (visible(bh / F.H, i0, j0))
          W.tile(s.data(), dp.data(), bh / F.H, bh % F.H, i0, nq_at(i0), j0, nk_at(j0), false, true);
    }
  });
  parallel_for(0, BH * nqb, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> s(tile), dp(tile);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bh = t / nqb, i0 = t % nqb * kBlockQ;
      for (int64_t j0 = 0; j0 < F.Lk; j0 += kBlockK)
        if (visible(bh / F.H, i0, j0))
          W.tile(s.data(), dp.data(), bh / F.H, bh % F.H, i0, nq_at(i0), j0, nk_at(j0), true, false);
    }
  });
}

// D_i = rowsum(dO_i * O_i) over [rows, Dv].
template <class T>
void row_dots(const T* a, const T* b, T* out, int64_t rows, int64_t n) {
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T acc = 0;
      for (int64_t e = 0; e < n; ++e) acc += a[r * n + e] * b[r * n + e];
      out[r] = acc;
    }
  });
}

}  // namespace

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale) {
  check_qkv(q, k, v, "flash_attention");
  if (!is_floating(q.dtype())) fail_not_floating("flash_attention");
  if (on_cuda(q)) return cuda_op::flash_attention(q, k, v, mask, scale);
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), Dv = v.size(3);
  check_attention_mask(mask, B, H, Lq, Lk, q.dtype(), "flash_attention");
  // The mask as the kernel reads it, kept by the backward: detached tensors, keep in the element type.
  AttentionMask m = mask;
  if (m.keep.defined()) m.keep = mask.keep.detach().to(q.dtype());
  if (m.bias.defined()) m.bias = mask.bias.detach();
  if (m.alibi_slopes.defined()) m.alibi_slopes = mask.alibi_slopes.detach();
  Tensor qd = rows_contiguous(q), kd = rows_contiguous(k), vd = rows_contiguous(v);
  Tensor out = empty({B, H, Lq, Dv}, q.dtype());
  Tensor lse = empty({B, H, Lq}, q.dtype());
  const GemmPrecision precision = matmul_precision();
  ENG_DISPATCH(q.dtype(), T,
               flash_forward<T>(make_flash<T>(qd, kd, vd, m, scale, precision), out.data<T>(), lse.data<T>()));
  const bool bias_grad = mask.bias.defined() && mask.bias.requires_grad();
  return record(out, "flash_attention", {q, k, v, mask.bias},
                [qd, kd, vd, m, scale, o = out.detach(), lse, bias_grad, precision](const Tensor& grad) {
                  const int64_t B = qd.size(0), H = qd.size(1), Lq = qd.size(2), Lk = kd.size(2);
                  Tensor go = grad.contiguous();
                  Tensor delta = empty({B, H, Lq}, o.dtype());
                  Tensor dq = zeros(qd.shape(), o.dtype()), dk = zeros(kd.shape(), o.dtype());
                  Tensor dv = zeros(vd.shape(), o.dtype()), dbias;
                  if (bias_grad) dbias = zeros({B, H, Lq, Lk}, o.dtype());
                  ENG_DISPATCH(o.dtype(), T, {
                    row_dots<T>(go.data<T>(), o.data<T>(), delta.data<T>(), B * H * Lq, o.size(3));
                    const Flash<T> F = make_flash<T>(qd, kd, vd, m, scale, precision);
                    flash_backward<T>(FlashBackward<T>{F, go.data<T>(), lse.data<T>(), delta.data<T>(), dq.data<T>(),
                                                       dk.data<T>(), dv.data<T>(),
                                                       bias_grad ? dbias.data<T>() : nullptr});
                  });
                  return std::vector<Tensor>{dq, dk, dv, bias_grad ? sum_to(dbias, m.bias.shape()) : Tensor()};
                });
}

}  // namespace eng
