#include "ops/attention_block_sparse.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "ops/attention_rows.h"
#include "ops/kernel_util.h"

namespace eng {

ENG_REGISTER_OP("block_sparse_attention");

namespace {

// The problem both passes share: operands, sizes, the mask, the layout, and the logits of one tile.
template <class T>
struct Sparse {
  int64_t B = 0, H = 0, Lq = 0, Lk = 0, D = 0, Dv = 0, bs = 0, nqb = 0, nkb = 0;
  T scale = 1;
  Rows<T> q, k, v;
  const AttentionMask* mask = nullptr;
  const BlockSparseLayout* L = nullptr;
  std::vector<T> slopes;  // empty: no ALiBi

  int64_t row(int64_t h, int64_t qb) const { return (L->heads == 1 ? 0 : h) * nqb + qb; }
  int64_t col(int64_t h, int64_t kb) const { return (L->heads == 1 ? 0 : h) * nkb + kb; }
  int64_t nq_at(int64_t qb) const { return std::min(bs, Lq - qb * bs); }
  int64_t nk_at(int64_t kb) const { return std::min(bs, Lk - kb * bs); }
  // Whether any query of block qb may see key block kb as far as causality and padding go.
  bool visible(int64_t b, int64_t qb, int64_t kb) const {
    return kb * bs < attention_key_end(*mask, b, qb * bs + nq_at(qb) - 1, Lk);
  }

  // s (row stride bs) = logits of query block qb against the key block of layout entry e:
  // q.k * scale - slope |i + query_offset - j|, or -inf where the layout or the mask hides the key.
  void logits(T* s, int64_t b, int64_t h, int64_t qb, int64_t e) const {
    const int64_t kb = L->key_block[size_t(e)], i0 = qb * bs, j0 = kb * bs, nq = nq_at(qb), nk = nk_at(kb);
    tile_product<T>(nq, nk, D, q.at(b, h, i0), q.sl, 1, k.at(b, h, j0), 1, k.sl, s, bs, false);
    const T neg_inf = -std::numeric_limits<T>::infinity();
    const bool full = L->bits_at[size_t(e)] < 0;
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t qi = i0 + i, end = attention_key_end(*mask, b, qi, Lk);
      T* r = s + i * bs;
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t kj = j0 + j;
        T x = r[j] * scale;
        if (!slopes.empty()) x -= slopes[size_t(h)] * T(std::abs(qi + mask->query_offset - kj));
        if (kj >= end || (!full && !L->entry_allows(e, i, j))) x = neg_inf;
        r[j] = x;
      }
    }
  }
};

// `m` holds detached tensors.
template <class T>
Sparse<T> make_sparse(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& m,
                      const BlockSparseLayout& L, double scale) {
  Sparse<T> S;
  S.B = q.size(0), S.H = q.size(1), S.Lq = q.size(2), S.Lk = k.size(2), S.D = q.size(3), S.Dv = v.size(3);
  S.bs = L.block, S.nqb = L.q_blocks(), S.nkb = L.k_blocks();
  S.scale = T(scale);
  S.q = rows_of<T>(q), S.k = rows_of<T>(k), S.v = rows_of<T>(v);
  S.mask = &m;
  S.L = &L;
  if (m.alibi_slopes.defined())
    for (double s : m.alibi_slopes.to_vector()) S.slopes.push_back(T(s));
  return S;
}

// out [B, H, Lq, Dv] and lse [B, H, Lq] (contiguous), one task per (batch, head, query block).
template <class T>
void sparse_forward(const Sparse<T>& S, T* out, T* lse) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t bs = S.bs, Dv = S.Dv;
  parallel_for(0, S.B * S.H * S.nqb, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> s(size_t(bs * bs)), m(static_cast<size_t>(bs)), l(static_cast<size_t>(bs));
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bh = t / S.nqb, b = bh / S.H, h = bh % S.H, qb = t % S.nqb;
      const int64_t i0 = qb * bs, nq = S.nq_at(qb), r = S.row(h, qb);
      T* o = out + (bh * S.Lq + i0) * Dv;  // accumulates the unnormalised output
      std::fill(o, o + nq * Dv, T(0));
      std::fill(m.begin(), m.end(), neg_inf);
      std::fill(l.begin(), l.end(), T(0));
      for (int64_t e = S.L->row_start[size_t(r)]; e < S.L->row_start[size_t(r + 1)]; ++e) {
        const int64_t kb = S.L->key_block[size_t(e)], nk = S.nk_at(kb);
        if (!S.visible(b, qb, kb)) break;  // key blocks increase: the rest are later still
        S.logits(s.data(), b, h, qb, e);
        for (int64_t i = 0; i < nq; ++i) {  // online softmax: the tile row becomes exp(s - m_new)
          T* row = s.data() + i * bs;
          T mx = m[size_t(i)];
          for (int64_t j = 0; j < nk; ++j)  // NaN-first, so that a NaN logit makes the row NaN
            if (row[j] > mx || std::isnan(row[j])) mx = row[j];
          if (mx == neg_inf) {  // nothing visible yet in this row
            std::fill(row, row + nk, T(0));
            continue;
          }
          const T alpha = std::exp(m[size_t(i)] - mx);
          T sum = 0;
          for (int64_t j = 0; j < nk; ++j) {
            row[j] = std::exp(row[j] - mx);
            sum += row[j];
          }
          l[size_t(i)] = l[size_t(i)] * alpha + sum;
          m[size_t(i)] = mx;
          if (alpha != T(1))
            for (int64_t c = 0; c < Dv; ++c) o[i * Dv + c] *= alpha;
        }
        tile_product<T>(nq, Dv, nk, s.data(), bs, 1, S.v.at(b, h, kb * bs), S.v.sl, 1, o, Dv, true);
      }
      finish_softmax_rows(nq, Dv, l, m, o, lse + bh * S.Lq + i0);
    }
  });
}

// The backward of one tile and the gradients it adds into (contiguous).
template <class T>
struct SparseBackward {
  const Sparse<T>& S;
  const T* dout;   // [B, H, Lq, Dv]
  const T* lse;    // [B, H, Lq]
  const T* delta;  // [B, H, Lq]: D_i = rowsum(dO_i * O_i)
  T *dq, *dk, *dv;

  // Recomputes P = exp(S - L) for query block qb against entry e, then dS = P * (dP - D_i); adds dS K to dQ
  // (with_q) and P^T dO, dS^T Q to dV, dK (with_kv).
  void tile(T* s, T* dp, int64_t b, int64_t h, int64_t qb, int64_t e, bool with_q, bool with_kv) const {
    const int64_t bh = b * S.H + h, bs = S.bs, kb = S.L->key_block[size_t(e)];
    const int64_t i0 = qb * bs, j0 = kb * bs, nq = S.nq_at(qb), nk = S.nk_at(kb), D = S.D, Dv = S.Dv;
    const T neg_inf = -std::numeric_limits<T>::infinity();
    const T* L = lse + bh * S.Lq + i0;
    const T* Di = delta + bh * S.Lq + i0;
    const T* go = dout + (bh * S.Lq + i0) * Dv;
    S.logits(s, b, h, qb, e);
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j) {
        T& x = s[i * bs + j];
        x = (x == neg_inf || L[i] == neg_inf) ? T(0) : std::exp(x - L[i]);
      }
    tile_product<T>(nq, nk, Dv, go, Dv, 1, S.v.at(b, h, j0), 1, S.v.sl, dp, bs, false);
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j) dp[i * bs + j] = s[i * bs + j] * (dp[i * bs + j] - Di[i]) * S.scale;
    if (with_kv) {
      tile_product<T>(nk, Dv, nq, s, 1, bs, go, Dv, 1, dv + (bh * S.Lk + j0) * Dv, Dv, true);
      tile_product<T>(nk, D, nq, dp, 1, bs, S.q.at(b, h, i0), S.q.sl, 1, dk + (bh * S.Lk + j0) * D, D, true);
    }
    if (with_q) tile_product<T>(nq, D, nk, dp, bs, 1, S.k.at(b, h, j0), S.k.sl, 1, dq + (bh * S.Lq + i0) * D, D, true);
  }
};

// As in flash_attention: each dQ row sums over its key blocks in increasing order and each dK, dV row over its
// query blocks in increasing order, in both schedules, so the result depends on neither schedule nor threads.
template <class T>
void sparse_backward(const SparseBackward<T>& W) {
  const Sparse<T>& S = W.S;
  const BlockSparseLayout& L = *S.L;
  const int64_t BH = S.B * S.H;
  const size_t tile = size_t(S.bs * S.bs);
  // The column pass: every tile of key block kb, query blocks increasing.
  auto column = [&](T* s, T* dp, int64_t bh, int64_t kb, bool with_q) {
    const int64_t b = bh / S.H, h = bh % S.H, c = S.col(h, kb);
    for (int64_t p = L.col_start[size_t(c)]; p < L.col_start[size_t(c + 1)]; ++p) {
      const int64_t qb = L.col_qblock[size_t(p)];
      if (S.visible(b, qb, kb)) W.tile(s, dp, b, h, qb, L.col_entry[size_t(p)], with_q, true);
    }
  };
  if (BH >= 4 * int64_t(num_threads())) {  // enough heads: one task per head does all three gradients
    parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
      std::vector<T> s(tile), dp(tile);
      for (int64_t bh = lo; bh < hi; ++bh)
        for (int64_t kb = 0; kb < S.nkb; ++kb) column(s.data(), dp.data(), bh, kb, true);
    });
    return;
  }
  // Few heads: dK, dV per key block, then dQ per query block, each pass recomputing its tiles.
  parallel_for(0, BH * S.nkb, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> s(tile), dp(tile);
    for (int64_t t = lo; t < hi; ++t) column(s.data(), dp.data(), t / S.nkb, t % S.nkb, false);
  });
  parallel_for(0, BH * S.nqb, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> s(tile), dp(tile);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bh = t / S.nqb, b = bh / S.H, h = bh % S.H, qb = t % S.nqb, r = S.row(h, qb);
      for (int64_t e = L.row_start[size_t(r)]; e < L.row_start[size_t(r + 1)]; ++e)
        if (S.visible(b, qb, L.key_block[size_t(e)])) W.tile(s.data(), dp.data(), b, h, qb, e, true, false);
    }
  });
}

// D_i = rowsum(dO_i * O_i) over [rows, Dv].
template <class T>
void row_dots(const T* a, const T* b, T* out, int64_t rows, int64_t n) {
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T acc = 0;
      for (int64_t c = 0; c < n; ++c) acc += a[r * n + c] * b[r * n + c];
      out[r] = acc;
    }
  });
}

}  // namespace

Tensor block_sparse_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                              const std::shared_ptr<const BlockSparseLayout>& layout, double scale) {
  check_qkv(q, k, v, "block_sparse_attention");
  if (!is_floating(q.dtype())) fail_not_floating("block_sparse_attention");
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), Dv = v.size(3);
  check_attention_mask(mask, B, H, Lq, Lk, q.dtype(), "block_sparse_attention");
  ENG_CHECK(!mask.keep.defined() && !mask.bias.defined(), "block_sparse_attention: keep and bias masks are dense [", B,
            ", ", H, ", ", Lq, ", ", Lk, "]; put the pattern in the layout instead");
  ENG_CHECK(layout != nullptr, "block_sparse_attention: no layout");
  check_block_sparse_layout(*layout, H, Lq, Lk, "block_sparse_attention");
  AttentionMask m = mask;  // as the kernel reads it, kept by the backward
  if (m.alibi_slopes.defined()) m.alibi_slopes = mask.alibi_slopes.detach();
  Tensor qd = rows_contiguous(q), kd = rows_contiguous(k), vd = rows_contiguous(v);
  Tensor out = empty({B, H, Lq, Dv}, q.dtype());
  Tensor lse = empty({B, H, Lq}, q.dtype());
  ENG_DISPATCH(q.dtype(), T,
               sparse_forward<T>(make_sparse<T>(qd, kd, vd, m, *layout, scale), out.data<T>(), lse.data<T>()));
  return record(out, "block_sparse_attention", {q, k, v},
                [qd, kd, vd, m, layout, scale, o = out.detach(), lse](const Tensor& grad) {
                  const int64_t B = qd.size(0), H = qd.size(1), Lq = qd.size(2);
                  Tensor go = grad.contiguous();
                  Tensor delta = empty({B, H, Lq}, o.dtype());
                  Tensor dq = zeros(qd.shape(), o.dtype()), dk = zeros(kd.shape(), o.dtype());
                  Tensor dv = zeros(vd.shape(), o.dtype());
                  ENG_DISPATCH(o.dtype(), T, {
                    row_dots<T>(go.data<T>(), o.data<T>(), delta.data<T>(), B * H * Lq, o.size(3));
                    const Sparse<T> S = make_sparse<T>(qd, kd, vd, m, *layout, scale);
                    sparse_backward<T>(SparseBackward<T>{S, go.data<T>(), lse.data<T>(), delta.data<T>(), dq.data<T>(),
                                                         dk.data<T>(), dv.data<T>()});
                  });
                  return std::vector<Tensor>{dq, dk, dv};
                });
}

}  // namespace eng
