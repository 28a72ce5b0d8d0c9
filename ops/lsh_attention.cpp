#include "ops/lsh_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "ops/attention_mask.h"
#include "ops/attention_rows.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_OP("lsh_chunk_attention");

namespace {

template <class T>
void copy_row(const T* src, T* dst, int64_t n) {
  if (src)
    std::copy(src, src + n, dst);
  else
    std::fill(dst, dst + n, T(0));
}

template <class T>
void add_rows(const T* src, T* dst, int64_t n) {
  for (int64_t e = 0; e < n; ++e) dst[e] += src[e];
}

// One chunk's rows, gathered in sorted order, and its c × W logits: the per-thread scratch of both passes.
template <class T>
struct Chunk {
  std::vector<int64_t> qi, kj;  // [c], [W]: the original positions of the query and key slots (-1: padding)
  std::vector<int64_t> qc, qp, kc;  // [c, R], [c, R], [W, R]: own and previous chunk of each query, chunk of each key
  std::vector<T> qs, ks, vs, s;     // [c, D], [W, D], [W, Dv], [c, W]
  Chunk(const LshChunkLayout& L, int64_t D, int64_t Dv)
      : qi(size_t(L.c)), kj(size_t(L.width())), qc(size_t(L.c * L.R)), qp(qc.size()), kc(size_t(L.width() * L.R)),
        qs(size_t(L.c * D)), ks(size_t(L.width() * D)), vs(size_t(L.width() * Dv)), s(size_t(L.c * L.width())) {}
};

// The problem both passes share: operands, sizes and the layout.
template <class T>
struct Lsh {
  const LshChunkLayout& L;
  int64_t D, Dv, W;
  T scale, self_logit;
  Rows<T> q, k, v;
  bool dedup;
  std::vector<T> log_count;  // log n for n = 0 .. R

  Lsh(const LshChunkLayout& layout, const Tensor& qd, const Tensor& kd, const Tensor& vd, double sc)
      : L(layout), D(qd.size(3)), Dv(vd.size(3)), W(layout.width()), scale(T(sc)), self_logit(T(layout.self_logit)),
        q(rows_of<T>(qd)), k(rows_of<T>(kd)), v(rows_of<T>(vd)), dedup(layout.dedup && layout.R > 1) {
    for (int64_t n = 0; n <= L.R; ++n) log_count.push_back(T(std::log(double(n))));
  }

  int64_t prev_chunk(int64_t ch) const { return (ch + L.nc - 1) % L.nc; }

  // Positions and rows of chunk ch of round r of head bh (padding slots get zero rows).
  void gather(Chunk<T>& C, int64_t bh, int64_t r, int64_t ch) const {
    const int64_t c = L.c, b = bh / L.H, h = bh % L.H;
    const int64_t* ord = &L.order[size_t((bh * L.R + r) * L.slots())];
    for (int64_t a = 0; a < c; ++a) {
      const int64_t i = ord[ch * c + a];
      C.qi[size_t(a)] = i;
      copy_row(i < 0 ? nullptr : q.at(b, h, i), &C.qs[size_t(a * D)], D);
    }
    for (int64_t w = 0; w < W; ++w) {
      const int64_t j = ord[(w < c ? ch : prev_chunk(ch)) * c + w % c];
      C.kj[size_t(w)] = j;
      copy_row(j < 0 ? nullptr : k.at(b, h, j), &C.ks[size_t(w * D)], D);
      copy_row(j < 0 ? nullptr : v.at(b, h, j), &C.vs[size_t(w * Dv)], Dv);
    }
  }

  // Window mode: whether query i sees key j in round r (same bucket, j among the W sorted at or before i).
  bool in_window(int64_t bh, int64_t r, int64_t i, int64_t j) const {
    const size_t at = size_t((bh * L.R + r) * L.N);
    const int64_t gap = L.slot[at + size_t(i)] - L.slot[at + size_t(j)];
    return L.bucket[at + size_t(i)] == L.bucket[at + size_t(j)] && gap >= 0 && gap < L.window;
  }

  // N_ij of query slot a and key slot w, from the chunks of both in every round (window mode: from the windows).
  int64_t seen(const Chunk<T>& C, int64_t bh, int64_t a, int64_t w) const {
    const int64_t R = L.R;
    if (L.window > 0) {
      int64_t n = 0;
      for (int64_t r = 0; r < R; ++r) n += in_window(bh, r, C.qi[size_t(a)], C.kj[size_t(w)]);
      return n;
    }
    const int64_t *ic = &C.qc[size_t(a * R)], *ip = &C.qp[size_t(a * R)], *jc = &C.kc[size_t(w * R)];
    int64_t n = 0;
    for (int64_t r = 0; r < R; ++r) n += jc[r] == ic[r] || (L.nc > 1 && jc[r] == ip[r]);
    return n;
  }

  // C.s = the logits of the gathered chunk of round r (after gather()).
  void logits(Chunk<T>& C, int64_t bh, int64_t r_chunk) const {
    const int64_t c = L.c, b = bh / L.H, R = L.R, N = L.N;
    const T neg_inf = -std::numeric_limits<T>::infinity();
    tile_product<T>(c, W, D, C.qs.data(), D, 1, C.ks.data(), 1, D, C.s.data(), W, false);
    if (dedup && L.window == 0) {
      auto chunk_in = [&](int64_t r, int64_t i) { return L.slot[size_t((bh * R + r) * N + i)] / c; };
      for (int64_t a = 0; a < c; ++a)
        for (int64_t r = 0; r < R; ++r) {
          const int64_t i = C.qi[size_t(a)], ch = i < 0 ? 0 : chunk_in(r, i);
          C.qc[size_t(a * R + r)] = ch;
          C.qp[size_t(a * R + r)] = prev_chunk(ch);
        }
      for (int64_t w = 0; w < W; ++w)
        for (int64_t r = 0; r < R; ++r) {
          const int64_t j = C.kj[size_t(w)];
          C.kc[size_t(w * R + r)] = j < 0 ? 0 : chunk_in(r, j);
        }
    }
    for (int64_t a = 0; a < c; ++a) {
      const int64_t i = C.qi[size_t(a)], end = i < 0 ? 0 : L.key_end[size_t(b * N + i)];
      T* row = &C.s[size_t(a * W)];
      for (int64_t w = 0; w < W; ++w) {
        const int64_t j = C.kj[size_t(w)];
        if (j < 0 || j >= end || (L.window > 0 && !in_window(bh, r_chunk, i, j)))
          row[w] = neg_inf;
        else if (j == i)
          row[w] = self_logit;
        else if (dedup)
          row[w] = row[w] * scale - log_count[size_t(seen(C, bh, a, w))];
        else
          row[w] = row[w] * scale;
      }
    }
  }
};

// out [B, H, R, N, Dv + 1] (o, then z), one task per (head, round, chunk): every query row is written by one task.
template <class T>
void lsh_forward(const Lsh<T>& P, T* out) {
  const LshChunkLayout& L = P.L;
  const int64_t c = L.c, nc = L.nc, R = L.R, N = L.N, W = P.W, Dv = P.Dv;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  parallel_for(0, L.B * L.H * R * nc, 1, [&](int64_t lo, int64_t hi) {
    Chunk<T> C(L, P.D, Dv);
    std::vector<T> o(size_t(c * Dv)), m(static_cast<size_t>(c)), l(m.size()), z(m.size());
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bh = t / (R * nc), r = t / nc % R, ch = t % nc;
      P.gather(C, bh, r, ch);
      P.logits(C, bh, r);
      for (int64_t a = 0; a < c; ++a) {  // the row becomes exp(l - max); a row with no visible key stays all 0
        T* row = &C.s[size_t(a * W)];
        m[size_t(a)] = row_maximum(row, W);
        if (m[size_t(a)] == neg_inf) {
          std::fill(row, row + W, T(0));
          l[size_t(a)] = 0;
        } else {
          l[size_t(a)] = exp_minus(row, m[size_t(a)], W);
        }
      }
      tile_product<T>(c, Dv, W, C.s.data(), W, 1, C.vs.data(), Dv, 1, o.data(), Dv, false);
      finish_softmax_rows(c, Dv, l, m, o.data(), z.data());
      for (int64_t a = 0; a < c; ++a) {
        const int64_t i = C.qi[size_t(a)];
        if (i < 0) continue;
        T* dst = out + ((bh * R + r) * N + i) * (Dv + 1);
        std::copy(&o[size_t(a * Dv)], &o[size_t(a * Dv)] + Dv, dst);
        dst[Dv] = z[size_t(a)];
      }
    }
  });
}

// The backward of whole rounds: per chunk, recomputes the logits and adds the chunk's gradients into the rows of
// its queries (gq) and keys (gk, gv), the chunks in increasing order.
template <class T>
struct LshBackward {
  const Lsh<T>& P;
  const T* grad;  // [B, H, R, N, Dv + 1]: g, then gz
  const T* out;   // the forward's result: o, then z

  struct Scratch {
    Chunk<T> C;
    std::vector<T> g, dp, dqs, dks, dvs, z, gz, delta;  // [c, Dv], [c, W], [c, D], [W, D], [W, Dv], [c] x 3
    Scratch(const Lsh<T>& P)
        : C(P.L, P.D, P.Dv), g(size_t(P.L.c * P.Dv)), dp(size_t(P.L.c * P.W)), dqs(size_t(P.L.c * P.D)),
          dks(size_t(P.W * P.D)), dvs(size_t(P.W * P.Dv)), z(size_t(P.L.c)), gz(z.size()), delta(z.size()) {}
  };

  // gq, gk [N, D] and gv [N, Dv] of head bh (not cleared: the round's gradients are added).
  void round(Scratch& S, int64_t bh, int64_t r, T* gq, T* gk, T* gv) const {
    const LshChunkLayout& L = P.L;
    const int64_t c = L.c, N = L.N, W = P.W, D = P.D, Dv = P.Dv;
    const T neg_inf = -std::numeric_limits<T>::infinity();
    Chunk<T>& C = S.C;
    for (int64_t ch = 0; ch < L.nc; ++ch) {
      P.gather(C, bh, r, ch);
      for (int64_t a = 0; a < c; ++a) {
        const int64_t i = C.qi[size_t(a)];
        const T* gr = i < 0 ? nullptr : grad + ((bh * L.R + r) * N + i) * (Dv + 1);
        const T* orow = i < 0 ? nullptr : out + ((bh * L.R + r) * N + i) * (Dv + 1);
        copy_row(gr, &S.g[size_t(a * Dv)], Dv);
        S.z[size_t(a)] = orow ? orow[Dv] : neg_inf;
        S.gz[size_t(a)] = gr ? gr[Dv] : T(0);
        T d = 0;
        for (int64_t e = 0; e < Dv && orow; ++e) d += gr[e] * orow[e];
        S.delta[size_t(a)] = d;
      }
      P.logits(C, bh, r);
      for (int64_t a = 0; a < c; ++a) {  // p = exp(l - z); a row with no visible key has p = 0
        T* row = &C.s[size_t(a * W)];
        if (S.z[size_t(a)] == neg_inf)
          std::fill(row, row + W, T(0));
        else
          exp_minus(row, S.z[size_t(a)], W);
      }
      tile_product<T>(c, W, Dv, S.g.data(), Dv, 1, C.vs.data(), 1, Dv, S.dp.data(), W, false);
      for (int64_t a = 0; a < c; ++a) {  // dp becomes scale · dl on the real logits, 0 on self and hidden entries
        const int64_t i = C.qi[size_t(a)];
        const T* p = &C.s[size_t(a * W)];
        T* d = &S.dp[size_t(a * W)];
        if (S.z[size_t(a)] == neg_inf) {
          std::fill(d, d + W, T(0));
          continue;
        }
        const T shift = S.gz[size_t(a)] - S.delta[size_t(a)];
        for (int64_t w = 0; w < W; ++w) d[w] = C.kj[size_t(w)] == i ? T(0) : p[w] * (d[w] + shift) * P.scale;
      }
      tile_product<T>(W, Dv, c, C.s.data(), 1, W, S.g.data(), Dv, 1, S.dvs.data(), Dv, false);
      tile_product<T>(W, D, c, S.dp.data(), 1, W, C.qs.data(), D, 1, S.dks.data(), D, false);
      tile_product<T>(c, D, W, S.dp.data(), W, 1, C.ks.data(), D, 1, S.dqs.data(), D, false);
      for (int64_t a = 0; a < c; ++a)
        if (C.qi[size_t(a)] >= 0) add_rows(&S.dqs[size_t(a * D)], gq + C.qi[size_t(a)] * D, D);
      for (int64_t w = 0; w < W; ++w) {
        const int64_t j = C.kj[size_t(w)];
        if (j < 0) continue;
        add_rows(&S.dks[size_t(w * D)], gk + j * D, D);
        add_rows(&S.dvs[size_t(w * Dv)], gv + j * Dv, Dv);
      }
    }
  }
};

// dq, dk [B, H, N, D] and dv [B, H, N, Dv], zeroed. Each row gets its rounds in increasing order, each round
// summed on its own first (a query row has one term per round, a key row two), in both schedules.
template <class T>
void lsh_backward(const LshBackward<T>& G, DType dtype, T* dq, T* dk, T* dv) {
  const LshChunkLayout& L = G.P.L;
  const int64_t BH = L.B * L.H, R = L.R, N = L.N, D = G.P.D, Dv = G.P.Dv;
  using Scratch = typename LshBackward<T>::Scratch;
  if (R == 1 || BH >= 4 * int64_t(num_threads())) {  // enough heads: one task per head, rounds one after another
    parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
      Scratch S(G.P);
      std::vector<T> gk(size_t(N * D)), gv(size_t(N * Dv));
      for (int64_t bh = lo; bh < hi; ++bh)
        for (int64_t r = 0; r < R; ++r) {
          std::fill(gk.begin(), gk.end(), T(0));
          std::fill(gv.begin(), gv.end(), T(0));
          G.round(S, bh, r, dq + bh * N * D, gk.data(), gv.data());
          add_rows(gk.data(), dk + bh * N * D, N * D);
          add_rows(gv.data(), dv + bh * N * Dv, N * Dv);
        }
    });
    return;
  }
  // Few heads: every (head, round) into a gradient buffer of its own, then the rounds summed per head.
  const size_t E = size_t(2 * D + Dv);  // per position: gq, gk, gv
  Tensor buf = zeros({BH * R, N, int64_t(E)}, dtype);
  T* per_round = buf.data<T>();
  auto at = [&](int64_t t) { return per_round + size_t(t * N) * E; };
  parallel_for(0, BH * R, 1, [&](int64_t lo, int64_t hi) {
    Scratch S(G.P);
    for (int64_t t = lo; t < hi; ++t)
      G.round(S, t / R, t % R, at(t), at(t) + N * D, at(t) + 2 * N * D);
  });
  parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t bh = lo; bh < hi; ++bh)
      for (int64_t r = 0; r < R; ++r) {
        const T* g = at(bh * R + r);
        add_rows(g, dq + bh * N * D, N * D);
        add_rows(g + N * D, dk + bh * N * D, N * D);
        add_rows(g + 2 * N * D, dv + bh * N * Dv, N * Dv);
      }
  });
}

}  // namespace

void check_lsh_chunk_layout(const LshChunkLayout& L, int64_t B, int64_t H, int64_t N, const char* op) {
  ENG_CHECK(L.B == B && L.H == H && L.N == N, op, ": the layout is for [B, H, N] = [", L.B, ", ", L.H, ", ", L.N,
            "], the input is [", B, ", ", H, ", ", N, "]");
  ENG_CHECK(L.R >= 1 && L.c >= 1 && L.nc == (N + L.c - 1) / L.c, op, ": the layout has ", L.R, " rounds and ", L.nc,
            " chunks of ", L.c, " for ", N, " positions (needs rounds >= 1, chunk >= 1, ceil(N / chunk) chunks)");
  const int64_t BHR = B * H * L.R, Np = L.slots();
  ENG_CHECK(L.order.size() == size_t(BHR * Np) && L.slot.size() == size_t(BHR * N) && L.key_end.size() == size_t(B * N),
            op, ": the layout's order, slot and key_end have ", L.order.size(), ", ", L.slot.size(), " and ",
            L.key_end.size(), " entries, ", BHR * Np, ", ", BHR * N, " and ", B * N, " expected");
  for (int64_t t = 0; t < BHR; ++t) {
    int64_t used = 0;
    for (int64_t s = 0; s < Np; ++s) {
      const int64_t i = L.order[size_t(t * Np + s)];
      ENG_CHECK(i >= -1 && i < N && (i < 0 || L.slot[size_t(t * N + i)] == s), op, ": the layout's order and slot ",
                "are not inverse permutations (slot ", s, " of head-round ", t, " holds ", i, ")");
      used += i >= 0;
    }
    ENG_CHECK(used == N, op, ": the layout's order of head-round ", t, " holds ", used, " of ", N, " positions");
  }
  for (int64_t e : L.key_end) ENG_CHECK(e >= 0 && e <= N, op, ": the layout's key_end ", e, " is outside [0, ", N, "]");
  if (L.window == 0) return;
  ENG_CHECK(L.window > 0 && L.c == std::min(L.window, N) && L.bucket.size() == size_t(BHR * N), op,
            ": a layout of window ", L.window, " needs chunks of min(window, N) = ", std::min(L.window, N),
            " (has ", L.c, ") and ", BHR * N, " bucket ids (has ", L.bucket.size(), ")");
  for (int64_t t = 0; t < BHR; ++t)  // sorted stably by bucket: (bucket, position) increases along the slots
    for (int64_t s = 1; s < N; ++s) {
      const int64_t i = L.order[size_t(t * Np + s - 1)], j = L.order[size_t(t * Np + s)];
      const auto bucket = [&](int64_t n) { return L.bucket[size_t(t * N + n)]; };
      ENG_CHECK(i >= 0 && j >= 0 && (bucket(i) < bucket(j) || (bucket(i) == bucket(j) && i < j)), op,
                ": the layout's slots ", s - 1, " and ", s, " of head-round ", t, " are not sorted by (bucket, position)");
    }
}

std::pair<Tensor, Tensor> lsh_chunk_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const std::shared_ptr<const LshChunkLayout>& layout, double scale) {
  const char* op = "lsh_chunk_attention";
  check_qkv(q, k, v, op);
  if (!is_floating(q.dtype())) fail_not_floating(op);
  ENG_CHECK(q.size(2) == k.size(2), op, ": self-attention only (one position per query and key), got q ", q.shape(),
            " and k ", k.shape());
  ENG_CHECK(layout != nullptr, op, ": no layout");
  ENG_CHECK(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), Dv = v.size(3);
  check_lsh_chunk_layout(*layout, B, H, N, op);
  Tensor qd = rows_contiguous(q), kd = rows_contiguous(k), vd = rows_contiguous(v);
  Tensor out = empty({B, H, layout->R, N, Dv + 1}, q.dtype());
  ENG_DISPATCH(q.dtype(), T, lsh_forward<T>(Lsh<T>(*layout, qd, kd, vd, scale), out.data<T>()));
  out = record(out, op, {q, k, v}, [qd, kd, vd, layout, scale, o = out.detach()](const Tensor& grad) {
    Tensor g = grad.contiguous();
    Tensor dq = zeros(qd.shape(), qd.dtype()), dk = zeros(kd.shape(), kd.dtype()), dv = zeros(vd.shape(), vd.dtype());
    ENG_DISPATCH(qd.dtype(), T, {
      const Lsh<T> P(*layout, qd, kd, vd, scale);
      lsh_backward<T>(LshBackward<T>{P, g.data<T>(), o.data<T>()}, qd.dtype(), dq.data<T>(), dk.data<T>(),
                      dv.data<T>());
    });
    return std::vector<Tensor>{dq, dk, dv};
  });
  return {narrow(out, 4, 0, Dv), narrow(out, 4, Dv, 1)};
}

}  // namespace eng
