#include "ops/linear_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "ops/attention_mask.h"
#include "ops/attention_rows.h"
#include "ops/fast_exp.h"
#include "ops/kernel_util.h"

namespace eng {

ENG_REGISTER_OP("linear_attention");
ENG_REGISTER_OP("causal_linear_attention");

// Both kernels carry the denominator as one more value column: with V⁺ = [V, 1] (E = Dv + 1 columns),
// Y = φ(Q) S⁺ holds the numerators in its first Dv columns and φ(q_i)ᵀ z in the last, so one product
// serves both. The backward does the same with G⁺_i = [G_i / d_i, −(G_i · out_i) / d_i], the gradient
// of Y_i through out_i = Y_i[:Dv] / d_i, d_i = Y_i[Dv] + eps.
namespace {

constexpr int64_t kChunk = 64;

// Branch-free forms, so that the loops over a row vectorise; fast_exp is exact for f64, ~2e-7 for f32.
template <class T>
inline T elu_plus_one(T x) {
  const T e = fast_exp(x < 0 ? x : T(0));
  return x > 0 ? x + 1 : e;
}

template <class T>
inline T relu_feature(T x) {
  return x > 0 ? x : T(0);
}

template <class T>
T feature(T x, LinearFeature f) {
  switch (f) {
    case LinearFeature::EluPlusOne: return elu_plus_one(x);
    case LinearFeature::Relu: return relu_feature(x);
    case LinearFeature::Identity: break;
  }
  return x;
}

template <class T>
struct Problem {
  int64_t B = 0, H = 0, N = 0, L = 0, M = 0, Dv = 0, E = 0;
  Rows<T> q, k, v;
  LinearFeature f = LinearFeature::EluPlusOne;
  T eps = 0;
  std::vector<int64_t> key_lengths;
  int64_t key_end(int64_t b) const { return key_lengths.empty() ? L : key_lengths[size_t(b)]; }
};

// Per-thread scratch for one chunk of C positions.
template <class T>
struct Chunk {
  std::vector<T> fq, fk, ve, ge, a, y, grad;  // [C, M], [C, M], [C, E], [C, E], [C, C], [C, E], [C, max(M, E)]
  std::vector<T> s;                         // the running state S⁺ (or R⁺ in the suffix pass), [M, E]
  Chunk(int64_t M, int64_t E)
      : fq(size_t(kChunk * M)), fk(size_t(kChunk * M)), ve(size_t(kChunk * E)), ge(size_t(kChunk * E)),
        a(size_t(kChunk * kChunk)), y(size_t(kChunk * E)), grad(size_t(kChunk * std::max(M, E))), s(size_t(M * E)) {}
};

// dst [rows, M] = φ(x rows r0 ..), rows at or beyond `end` zeroed (padding, after the feature map).
template <class T>
void load_features(const Problem<T>& P, const Rows<T>& x, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t end,
                   T* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* src = x.at(b, h, r0 + i);
    T* d = dst + i * P.M;
    if (r0 + i >= end) {
      std::fill(d, d + P.M, T(0));
    } else {
      switch (P.f) {  // one loop per map, so that each vectorises
        case LinearFeature::EluPlusOne:
          for (int64_t c = 0; c < P.M; ++c) d[c] = elu_plus_one(src[c]);
          break;
        case LinearFeature::Relu:
          for (int64_t c = 0; c < P.M; ++c) d[c] = relu_feature(src[c]);
          break;
        case LinearFeature::Identity: std::copy(src, src + P.M, d); break;
      }
    }
  }
}

// dst [rows, E] = [v rows, 1].
template <class T>
void load_values(const Problem<T>& P, int64_t b, int64_t h, int64_t r0, int64_t rows, T* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* src = P.v.at(b, h, r0 + i);
    std::copy(src, src + P.Dv, dst + i * P.E);
    dst[i * P.E + P.Dv] = T(1);
  }
}

// G⁺ [rows, E] from the output gradient, the output and the denominators (all contiguous).
template <class T>
void load_output_grad(const Problem<T>& P, const T* go, const T* out, const T* den, int64_t bh, int64_t r0,
                      int64_t rows, T* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = bh * P.N + r0 + i;
    const T* g = go + row * P.Dv;
    const T* o = out + row * P.Dv;
    const T inv = T(1) / den[row];
    T dot = 0;
    for (int64_t c = 0; c < P.Dv; ++c) {
      dst[i * P.E + c] = g[c] * inv;
      dot += g[c] * o[c];
    }
    dst[i * P.E + P.Dv] = -dot * inv;
  }
}

// Keeps the lower (j <= i) or upper (j >= i) triangle of a [rows, rows] tile, zeroing the rest.
template <class T>
void keep_triangle(T* a, int64_t rows, bool lower) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < rows; ++j)
      if (lower ? j > i : j < i) a[i * rows + j] = T(0);
}

// S⁺ += Fkᵀ V⁺ for one chunk.
template <class T>
void absorb(const Problem<T>& P, Chunk<T>& c, int64_t rows) {
  tile_product<T>(P.M, P.E, rows, c.fk.data(), 1, P.M, c.ve.data(), P.E, 1, c.s.data(), P.E, true);
}

// φ(K) and V⁺ of key rows r0 .. r0+rows into the chunk.
template <class T>
void load_keys(const Problem<T>& P, Chunk<T>& c, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t kend) {
  load_features(P, P.k, b, h, r0, rows, kend, c.fk.data());
  load_values(P, b, h, r0, rows, c.ve.data());
}

// S⁺ over every key: the non-causal state.
template <class T>
void absorb_all_keys(const Problem<T>& P, Chunk<T>& c, int64_t b, int64_t h, int64_t kend) {
  for (int64_t r0 = 0; r0 < P.L; r0 += kChunk) {
    const int64_t rows = std::min(kChunk, P.L - r0);
    load_keys(P, c, b, h, r0, rows, kend);
    absorb(P, c, rows);
  }
}

// ∂L/∂φ(x) in `grad` [rows, M] -> ∂L/∂x rows r0 .. of dst (contiguous [.., M]), with φ(x) of those rows in
// `phi` (elu+1's slope below 0 is exp(x) = φ(x), so no exp is recomputed); padded rows get 0.
template <class T>
void store_input_grad(const Problem<T>& P, const Rows<T>& x, int64_t b, int64_t h, int64_t r0, int64_t rows,
                      int64_t end, const T* phi, const T* grad, T* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* src = x.at(b, h, r0 + i);
    T* d = dst + i * P.M;
    const T* g = grad + i * P.M;
    const T* f = phi + i * P.M;
    if (r0 + i >= end) {
      std::fill(d, d + P.M, T(0));
      continue;
    }
    switch (P.f) {  // one loop per map, so that each vectorises
      case LinearFeature::EluPlusOne:
        for (int64_t c = 0; c < P.M; ++c) d[c] = g[c] * (src[c] > 0 ? T(1) : f[c]);  // slope exp(x) = φ(x) below 0
        break;
      case LinearFeature::Relu:
        for (int64_t c = 0; c < P.M; ++c) d[c] = src[c] > 0 ? g[c] : T(0);
        break;
      case LinearFeature::Identity: std::copy(g, g + P.M, d); break;
    }
  }
}

template <class T>
void forward_head(const Problem<T>& P, bool causal, int64_t bh, T* out, T* den) {
  const int64_t b = bh / P.H, h = bh % P.H, M = P.M, E = P.E, kend = P.key_end(b);
  Chunk<T> c(M, E);
  if (!causal) absorb_all_keys(P, c, b, h, kend);  // the whole state first
  for (int64_t r0 = 0; r0 < P.N; r0 += kChunk) {
    const int64_t rows = std::min(kChunk, P.N - r0);
    load_features(P, P.q, b, h, r0, rows, P.N, c.fq.data());
    tile_product<T>(rows, E, M, c.fq.data(), M, 1, c.s.data(), E, 1, c.y.data(), E, false);  // Y = Fq S⁺_prev
    if (causal) {  // Y += tril(Fq Fkᵀ) V⁺ within the chunk, then S⁺ absorbs the chunk
      load_keys(P, c, b, h, r0, rows, kend);
      tile_product<T>(rows, rows, M, c.fq.data(), M, 1, c.fk.data(), 1, M, c.a.data(), rows, false);
      keep_triangle(c.a.data(), rows, true);
      tile_product<T>(rows, E, rows, c.a.data(), rows, 1, c.ve.data(), E, 1, c.y.data(), E, true);
      absorb(P, c, rows);
    }
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t row = bh * P.N + r0 + i;
      const T* y = c.y.data() + i * E;
      const T d = y[P.Dv] + P.eps;
      den[row] = d;
      for (int64_t j = 0; j < P.Dv; ++j) out[row * P.Dv + j] = y[j] / d;
    }
  }
}

// ∇q: the prefix pass. ∂L/∂φ(q_i) = G⁺_i S⁺_iᵀ, with S⁺_i = Σ_{j<=i} φ(k_j) v⁺_jᵀ (all j when not causal).
template <class T>
void backward_queries(const Problem<T>& P, bool causal, int64_t bh, const T* go, const T* out, const T* den, T* dq) {
  const int64_t b = bh / P.H, h = bh % P.H, M = P.M, E = P.E, kend = P.key_end(b);
  Chunk<T> c(M, E);
  if (!causal) absorb_all_keys(P, c, b, h, kend);
  for (int64_t r0 = 0; r0 < P.N; r0 += kChunk) {
    const int64_t rows = std::min(kChunk, P.N - r0);
    load_output_grad(P, go, out, den, bh, r0, rows, c.ge.data());
    tile_product<T>(rows, M, E, c.ge.data(), E, 1, c.s.data(), 1, E, c.grad.data(), M, false);  // G⁺ S⁺ᵀ
    if (causal) {  // + tril(G⁺ V⁺ᵀ) Fk within the chunk
      load_keys(P, c, b, h, r0, rows, kend);
      tile_product<T>(rows, rows, E, c.ge.data(), E, 1, c.ve.data(), 1, E, c.a.data(), rows, false);
      keep_triangle(c.a.data(), rows, true);
      tile_product<T>(rows, M, rows, c.a.data(), rows, 1, c.fk.data(), M, 1, c.grad.data(), M, true);
      absorb(P, c, rows);
    }
    load_features(P, P.q, b, h, r0, rows, P.N, c.fq.data());
    store_input_grad(P, P.q, b, h, r0, rows, P.N, c.fq.data(), c.grad.data(), dq + (bh * P.N + r0) * M);
  }
}

// ∇k and ∇v: the suffix pass, with R⁺_j = Σ_{i>=j} φ(q_i) G⁺_iᵀ (all i when not causal):
// ∂L/∂φ(k_j) = R⁺_j v⁺_j and ∂L/∂v⁺_j = R⁺_jᵀ φ(k_j).
template <class T>
void backward_keys(const Problem<T>& P, bool causal, int64_t bh, const T* go, const T* out, const T* den, T* dk,
                   T* dv) {
  const int64_t b = bh / P.H, h = bh % P.H, M = P.M, E = P.E, kend = P.key_end(b);
  Chunk<T> c(M, E);
  auto absorb_queries = [&](int64_t r0, int64_t rows) {  // R⁺ += Fqᵀ G⁺
    load_features(P, P.q, b, h, r0, rows, P.N, c.fq.data());
    load_output_grad(P, go, out, den, bh, r0, rows, c.ge.data());
    tile_product<T>(M, E, rows, c.fq.data(), 1, M, c.ge.data(), E, 1, c.s.data(), E, true);
  };
  const int64_t last = (P.L - 1) / kChunk * kChunk;
  if (!causal)
    for (int64_t r0 = 0; r0 < P.N; r0 += kChunk) absorb_queries(r0, std::min(kChunk, P.N - r0));
  for (int64_t r0 = last; r0 >= 0; r0 -= kChunk) {
    const int64_t rows = std::min(kChunk, P.L - r0);
    load_keys(P, c, b, h, r0, rows, kend);
    // ∂L/∂v⁺ = Fk R⁺ (+ triu(Fk Fqᵀ) G⁺ within the chunk), into y.
    tile_product<T>(rows, E, M, c.fk.data(), M, 1, c.s.data(), E, 1, c.y.data(), E, false);
    // ∂L/∂φ(k) = V⁺ R⁺ᵀ (+ triu(V⁺ G⁺ᵀ) Fq within the chunk), into grad.
    tile_product<T>(rows, M, E, c.ve.data(), E, 1, c.s.data(), 1, E, c.grad.data(), M, false);
    if (causal) {
      load_features(P, P.q, b, h, r0, rows, P.N, c.fq.data());
      load_output_grad(P, go, out, den, bh, r0, rows, c.ge.data());
      tile_product<T>(rows, rows, M, c.fk.data(), M, 1, c.fq.data(), 1, M, c.a.data(), rows, false);
      keep_triangle(c.a.data(), rows, false);
      tile_product<T>(rows, E, rows, c.a.data(), rows, 1, c.ge.data(), E, 1, c.y.data(), E, true);
      tile_product<T>(rows, rows, E, c.ve.data(), E, 1, c.ge.data(), 1, E, c.a.data(), rows, false);
      keep_triangle(c.a.data(), rows, false);
      tile_product<T>(rows, M, rows, c.a.data(), rows, 1, c.fq.data(), M, 1, c.grad.data(), M, true);
      tile_product<T>(M, E, rows, c.fq.data(), 1, M, c.ge.data(), E, 1, c.s.data(), E, true);
    }
    store_input_grad(P, P.k, b, h, r0, rows, kend, c.fk.data(), c.grad.data(), dk + (bh * P.L + r0) * M);
    for (int64_t i = 0; i < rows; ++i)
      std::copy(c.y.data() + i * E, c.y.data() + i * E + P.Dv, dv + (bh * P.L + r0 + i) * P.Dv);
  }
}

template <class T>
Problem<T> make_problem(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionArgs& args) {
  Problem<T> P;
  P.B = q.size(0), P.H = q.size(1), P.N = q.size(2), P.L = k.size(2), P.M = q.size(3), P.Dv = v.size(3);
  P.E = P.Dv + 1;
  P.q = rows_of<T>(q), P.k = rows_of<T>(k), P.v = rows_of<T>(v);
  P.f = args.feature;
  P.eps = T(args.eps);
  P.key_lengths = args.key_lengths;
  return P;
}

void check_args(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionArgs& args, bool causal,
                const char* op) {
  check_qkv(q, k, v, op);
  if (!is_floating(q.dtype())) fail_not_floating(op);
  ENG_CHECK(!causal || q.size(2) == k.size(2), op, ": causal attention needs as many queries as keys, got q ",
            q.shape(), " and k ", k.shape());
  ENG_CHECK(args.eps >= 0 && std::isfinite(args.eps), op, ": eps must be finite and >= 0, got ", args.eps);
  if (!args.key_lengths.empty()) {
    ENG_CHECK(int64_t(args.key_lengths.size()) == q.size(0), op, ": key_lengths has ", args.key_lengths.size(),
              " entries for a batch of ", q.size(0));
    for (int64_t len : args.key_lengths)
      ENG_CHECK(len >= 0 && len <= k.size(2), op, ": key length ", len, " outside [0, ", k.size(2), "]");
  }
}

Tensor linear_attention_impl(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionArgs& args,
                             bool causal, const char* op) {
  check_args(q, k, v, args, causal, op);
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), Dv = v.size(3);
  Tensor qd = rows_contiguous(q), kd = rows_contiguous(k), vd = rows_contiguous(v);
  Tensor out = empty({B, H, N, Dv}, q.dtype());
  Tensor den = empty({B, H, N}, q.dtype());
  ENG_DISPATCH(q.dtype(), T, {
    const Problem<T> P = make_problem<T>(qd, kd, vd, args);
    T* o = out.data<T>();
    T* d = den.data<T>();
    parallel_for(0, B * H, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t bh = lo; bh < hi; ++bh) forward_head(P, causal, bh, o, d);
    });
  });
  return record(out, op, {q, k, v}, [qd, kd, vd, args, causal, o = out.detach(), den](const Tensor& grad) {
    Tensor go = grad.contiguous();
    Tensor dq = empty(qd.shape(), qd.dtype()), dk = empty(kd.shape(), kd.dtype()), dv = empty(vd.shape(), vd.dtype());
    ENG_DISPATCH(qd.dtype(), T, {
      const Problem<T> P = make_problem<T>(qd, kd, vd, args);
      const T *g = go.data<T>(), *op_out = o.data<T>(), *d = den.data<T>();
      // One task per (head, pass): the two passes are independent.
      parallel_for(0, 2 * P.B * P.H, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t) {
          if (t % 2 == 0)
            backward_queries(P, causal, t / 2, g, op_out, d, dq.data<T>());
          else
            backward_keys(P, causal, t / 2, g, op_out, d, dk.data<T>(), dv.data<T>());
        }
      });
    });
    return std::vector<Tensor>{dq, dk, dv};
  });
}

}  // namespace

Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionArgs& args) {
  return linear_attention_impl(q, k, v, args, false, "linear_attention");
}

Tensor causal_linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionArgs& args) {
  return linear_attention_impl(q, k, v, args, true, "causal_linear_attention");
}

Tensor linear_attention_step(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& s, Tensor& z,
                             const LinearAttentionArgs& args) {
  const char* op = "linear_attention_step";
  const bool update = k.defined();
  ENG_CHECK(q.dim() == 4 && q.size(2) == 1, op, ": q must be [B, H, 1, M], got ", q.shape());
  if (!is_floating(q.dtype())) fail_not_floating(op);
  const int64_t B = q.size(0), H = q.size(1), M = q.size(3);
  ENG_CHECK(s.defined() && z.defined() && s.dim() == 4 && s.size(0) == B && s.size(1) == H && s.size(2) == M &&
                z.dim() == 3 && z.size(0) == B && z.size(1) == H && z.size(2) == M,
            op, ": state s ", s.shape(), " and z ", z.shape(), " do not match q ", q.shape(),
            " (want s [B, H, M, Dv], z [B, H, M])");
  ENG_CHECK(s.dtype() == q.dtype() && z.dtype() == q.dtype() && s.is_contiguous() && z.is_contiguous(), op,
            ": the state must be contiguous and of q's dtype");
  const int64_t Dv = s.size(3);
  if (update) {
    check_qkv(q, k, v, op);
    ENG_CHECK(k.size(2) == 1 && v.size(3) == Dv, op, ": k ", k.shape(), " and v ", v.shape(),
              " must be one position matching the state s ", s.shape());
  }
  ENG_CHECK(args.key_lengths.empty(), op, ": key padding has no meaning for one step");
  NoGradGuard no_grad;
  Tensor qd = rows_contiguous(q), kd = update ? rows_contiguous(k) : Tensor(), vd = update ? rows_contiguous(v) : Tensor();
  Tensor out = empty({B, H, 1, Dv}, q.dtype());
  ENG_DISPATCH(q.dtype(), T, {
    const Rows<T> qr = rows_of<T>(qd);
    Rows<T> kr, vr;
    if (update) kr = rows_of<T>(kd), vr = rows_of<T>(vd);
    T* S = s.data<T>();
    T* Z = z.data<T>();
    T* o = out.data<T>();
    const T eps = T(args.eps);
    parallel_for(0, B * H, std::max<int64_t>(1, 4096 / std::max<int64_t>(M * Dv, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t bh = lo; bh < hi; ++bh) {
        const int64_t b = bh / H, h = bh % H;
        T* sh = S + bh * M * Dv;
        T* zh = Z + bh * M;
        if (update) {  // s += φ(k) vᵀ, z += φ(k)   (Eq. 18–19)
          const T* kk = kr.at(b, h, 0);
          const T* vv = vr.at(b, h, 0);
          for (int64_t m = 0; m < M; ++m) {
            const T fk = feature(kk[m], args.feature);
            zh[m] += fk;
            T* row = sh + m * Dv;
            for (int64_t j = 0; j < Dv; ++j) row[j] += fk * vv[j];
          }
        }
        const T* qq = qr.at(b, h, 0);
        T* oh = o + bh * Dv;
        std::fill(oh, oh + Dv, T(0));
        T d = eps;
        for (int64_t m = 0; m < M; ++m) {  // φ(q)ᵀ s / (φ(q)ᵀ z + eps)   (Eq. 20)
          const T fq = feature(qq[m], args.feature);
          d += fq * zh[m];
          const T* row = sh + m * Dv;
          for (int64_t j = 0; j < Dv; ++j) oh[j] += fq * row[j];
        }
        for (int64_t j = 0; j < Dv; ++j) oh[j] /= d;
      }
    });
  });
  return out;
}

}  // namespace eng
