#include "ops/linear_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "engine/vec_kernels.h"
#include "ops/attention_mask.h"
#include "ops/attention_rows.h"
#include "ops/cuda/dispatch.h"
#include "ops/fast_exp.h"
#include "ops/kernel_util.h"

namespace eng {

ENG_REGISTER_OP("linear_attention");
ENG_REGISTER_OP("causal_linear_attention");

// The non-causal kernel carries the denominator as one more value column: with V⁺ = [V, 1] (E = Dv + 1 columns),
// Y = φ(Q) S⁺ holds the numerators in its first Dv columns and φ(q_i)ᵀ z in the last, so one product
// serves both. Its backward does the same with G⁺_i = [G_i / d_i, −(G_i · out_i) / d_i], the gradient
// of Y_i through out_i = Y_i[:Dv] / d_i, d_i = Y_i[Dv] + eps. The causal kernels keep z and the ones apart
// (vector loops, and terms folded into the chunk's triangle), since there a 65th column is a third 32-column
// kernel panel on most of the products, and [V, 1] a copy of v in each of the three passes.
namespace {

// 56 = 4 x the AVX-512 kernel's 14 rows: products of that many rows run on the operands in place, without the
// packing a 64-row chunk's products paid on every call (bench attention causal-linear, N = 16384: about 15 % less CPU
// time than 64, measured against 32, 42, 48 and 64). With the triangle products by tiles (triangle_product),
// 28, 42, 56 and 64 ran within the noise of each other (N = 1024, CPU time, 6 alternating rounds).
constexpr int64_t kChunk = 56;

// Branch-free forms, so that the loops over a row vectorise; fast_exp is exact for f64, ~2e-7 for f32.
template <class T>
inline T elu_plus_one(T x) {
  const T e = fast_exp(x < 0 ? x : T(0));
  return x > 0 ? x + 1 : e;
}

// A row of elu + 1 features; f32 through the SIMD kernel (engine/vec_kernels.h).
template <class T>
void elu_plus_one_row(const T* src, T* d, int64_t n) {
  for (int64_t c = 0; c < n; ++c) d[c] = elu_plus_one(src[c]);
}
inline void elu_plus_one_row(const float* src, float* d, int64_t n) { vec_kernels().elu_plus_one(src, d, n); }

template <class T>
inline T relu_feature(T x) {
  return x > 0 ? x : T(0);
}

template <class T>
struct Problem {
  int64_t B = 0, H = 0, N = 0, L = 0, M = 0, Dv = 0, E = 0;
  DType dtype = DType::F32;
  Rows<T> q, k, v;
  LinearFeature f = LinearFeature::EluPlusOne;
  T eps = 0;
  std::vector<int64_t> key_lengths;
  int64_t key_end(int64_t b) const { return key_lengths.empty() ? L : key_lengths[size_t(b)]; }
};

// dst [rows, M] = φ(x rows r0 ..), rows at or beyond `end` zeroed (padding, after the feature map).
template <class T>
void load_features(const Problem<T>& P, const Rows<T>& x, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t end,
                   T* dst) {
  int64_t i = 0;
  if (P.f == LinearFeature::EluPlusOne && x.sl == P.M) {  // adjacent rows: one call for all rows before the padding
    i = std::max<int64_t>(0, std::min(rows, end - r0));
    elu_plus_one_row(x.at(b, h, r0), dst, i * P.M);
  }
  for (; i < rows; ++i) {
    const T* src = x.at(b, h, r0 + i);
    T* d = dst + i * P.M;
    if (r0 + i >= end) {
      std::fill(d, d + P.M, T(0));
    } else {
      switch (P.f) {  // one loop per map, so that each vectorises
        case LinearFeature::EluPlusOne: elu_plus_one_row(src, d, P.M); break;
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

// The output gradient as given, any strides: a broadcast one (the gradient of a sum) is read in place rather
// than copied out to [B, H, N, Dv] first.
template <class T>
struct OutputGrad {
  Rows<T> rows;
  int64_t cs = 1;  // column stride
};

// Σ a_i b_i and Σ a_i over a row; f32 through the SIMD kernels (a float sum written as a loop stays scalar).
template <class T>
T row_dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
inline float row_dot(const float* a, const float* b, int64_t n) { return vec_kernels().dot(a, b, n); }
template <class T>
T row_sum(const T* a, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i];
  return s;
}
inline float row_sum(const float* a, int64_t n) { return vec_kernels().sum(a, n); }

// gs_i = G_i / d_i (rows `ld` apart) and, unless gz is null, gz_i = -(G_i · out_i) / d_i (`gz_step` apart): the
// gradient of the numerators and of the denominator through out_i = numerator / d_i, from the output gradient, the
// output and the denominators (contiguous).
template <class T>
void load_output_grad(const Problem<T>& P, const OutputGrad<T>& go, const T* out, const T* den, int64_t bh, int64_t r0,
                      int64_t rows, T* gs, int64_t ld, T* gz, int64_t gz_step) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = bh * P.N + r0 + i;
    const T* g = go.rows.at(bh / P.H, bh % P.H, r0 + i);
    T* d = gs + i * ld;
    if (go.cs != 1) {  // gathered into the destination row first, so that the loops below vectorise
      if (go.cs == 0)  // broadcast along the row (the gradient of a sum)
        std::fill(d, d + P.Dv, g[0]);
      else
        for (int64_t c = 0; c < P.Dv; ++c) d[c] = g[c * go.cs];
      g = d;
    }
    const T inv = T(1) / den[row];
    if (gz) gz[i * gz_step] = -row_dot(g, out + row * P.Dv, P.Dv) * inv;
    for (int64_t c = 0; c < P.Dv; ++c) d[c] = g[c] * inv;
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
    switch (P.f) {  // one loop per map, both operands loaded unconditionally, so that each vectorises
      case LinearFeature::EluPlusOne:
        for (int64_t c = 0; c < P.M; ++c) {
          const T gc = g[c], fc = f[c];
          d[c] = src[c] > 0 ? gc : gc * fc;  // the slope below 0 is exp(x) = φ(x)
        }
        break;
      case LinearFeature::Relu:
        for (int64_t c = 0; c < P.M; ++c) {
          const T gc = g[c];
          d[c] = src[c] > 0 ? gc : T(0);
        }
        break;
      case LinearFeature::Identity: std::copy(g, g + P.M, d); break;
    }
  }
}

// Output rows r0 .. r0+rows from Y⁺ [rows, E]: out = Y[:Dv] / d, d = Y[Dv] + eps, kept for the backward.
template <class T>
void store_output(const Problem<T>& P, int64_t bh, int64_t r0, int64_t rows, const T* y, T* out, T* den) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = bh * P.N + r0 + i;
    const T* yi = y + i * P.E;
    const T d = yi[P.Dv] + P.eps;
    den[row] = d;
    for (int64_t j = 0; j < P.Dv; ++j) out[row * P.Dv + j] = yi[j] / d;
  }
}

// ∂L/∂v rows r0 .. r0+rows: the first Dv columns of ∂L/∂V⁺ [rows, E].
template <class T>
void store_values_grad(const Problem<T>& P, int64_t bh, int64_t r0, int64_t rows, const T* gv, T* dv) {
  for (int64_t i = 0; i < rows; ++i) std::copy(gv + i * P.E, gv + i * P.E + P.Dv, dv + (bh * P.L + r0 + i) * P.Dv);
}

// Per-thread scratch of the causal kernels for one chunk of C positions.
template <class T>
struct Chunk {
  std::vector<T> fq, fk, gs, a, grad;  // φ(Q), φ(K) [C, M]; G / d [C, Dv]; a triangle [C, C]; ∂L/∂φ [C, M]
  std::vector<T> s, z;                 // the running state S [M, Dv], z [M] (R and r in the suffix pass)
  Chunk(int64_t M, int64_t Dv)
      : fq(size_t(kChunk * M)), fk(size_t(kChunk * M)), gs(size_t(kChunk * Dv)), a(size_t(kChunk * kChunk)),
        grad(size_t(kChunk * M)), s(size_t(M * Dv)), z(size_t(M)) {}
};

// acc [M] += Σ_i w_i x_i over the rows of x [rows, M] (w = null: all weights 1): z and r absorb a chunk.
template <class T>
void add_rows(const T* x, const T* w, int64_t rows, int64_t M, T* acc) {
  for (int64_t i = 0; i < rows; ++i) {
    const T wi = w ? w[i] : T(1);
    for (int64_t m = 0; m < M; ++m) acc[m] += wi * x[i * M + m];
  }
}

// ∂L/∂q rows r0 .. r0+rows (never padded) from ∂L/∂φ(q) in c.grad, the features recomputed into c.fq for the
// slope; elu+1 on adjacent f32 rows in one pass of the SIMD elu backward instead (the same slope: 1 above 0, e^x below).
template <class T>
void store_query_grad(const Problem<T>& P, int64_t b, int64_t h, int64_t r0, int64_t rows, Chunk<T>& c, T* dst) {
  load_features(P, P.q, b, h, r0, rows, P.N, c.fq.data());
  store_input_grad(P, P.q, b, h, r0, rows, P.N, c.fq.data(), c.grad.data(), dst);
}
inline void store_query_grad(const Problem<float>& P, int64_t b, int64_t h, int64_t r0, int64_t rows, Chunk<float>& c,
                             float* dst) {
  if (P.f == LinearFeature::EluPlusOne && P.q.sl == P.M)
    vec_kernels().elu_backward(c.grad.data(), P.q.at(b, h, r0), dst, rows * P.M, 1.f);
  else
    store_query_grad<float>(P, b, h, r0, rows, c, dst);
}

// C [M, N] (rows c_rs) = bias + A B, the bias [N] on every row (the product starts from it: no pass of its own).
template <class T>
void product_with_bias(int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs, const T* B,
                       int64_t b_rs, int64_t b_cs, T* C, int64_t c_rs, const T* bias) {
  GemmArgs<T> g;
  g.M = M, g.N = N, g.K = K;
  g.A = A, g.a_rs = a_rs, g.a_cs = a_cs;
  g.B = B, g.b_rs = b_rs, g.b_cs = b_cs;
  g.C = C, g.c_rs = c_rs, g.bias = bias;
  gemm(g);
}

// The chunk's triangle products, the square's tiles computed only where the triangle reaches them (lower: columns
// j <= i, upper: j >= i), 3/4 (lower) or 7/8 (upper) of the AVX-512 kernel's 14 x 32 tiles and 5/8 of the
// multiply-adds against W:
//   a = X Yᵀ by 32-column panels, each over the 14-row tiles it meets (each panel of Yᵀ packed once);
//   fold(i, row i of a, c0, c1) for each row, the triangle's part of it [c0, c1) (the rest of the row zeroed);
//   out (+)= a W by blocks of 14 rows, each as far along k as its rows reach.
// X, Y [rows, K] and W [rows, n] by their row strides (columns contiguous), a [rows, rows].
constexpr int64_t kTriangleRows = 14, kTriangleCols = 32;

template <class T, class Fold>
void triangle_product(int64_t rows, bool lower, int64_t K, const T* x, int64_t x_rs, const T* y, int64_t y_rs, T* a,
                      Fold fold, int64_t n, const T* w, int64_t w_rs, T* out, int64_t out_rs, bool accumulate) {
  for (int64_t j0 = 0; j0 < rows; j0 += kTriangleCols) {
    const int64_t j1 = std::min(rows, j0 + kTriangleCols);
    const int64_t i0 = lower ? j0 / kTriangleRows * kTriangleRows : 0;
    const int64_t i1 = lower ? rows : std::min(rows, (j1 + kTriangleRows - 1) / kTriangleRows * kTriangleRows);
    tile_product<T>(i1 - i0, j1 - j0, K, x + i0 * x_rs, x_rs, 1, y + j0 * y_rs, 1, y_rs, a + i0 * rows + j0, rows,
                    false);
  }
  for (int64_t i = 0; i < rows; ++i) {
    T* ai = a + i * rows;
    const int64_t c0 = lower ? 0 : i, c1 = lower ? i + 1 : rows;
    std::fill(ai, ai + c0, T(0));
    std::fill(ai + c1, ai + rows, T(0));
    fold(i, ai, c0, c1);
  }
  for (int64_t i0 = 0; i0 < rows; i0 += kTriangleRows) {
    const int64_t i1 = std::min(rows, i0 + kTriangleRows), j0 = lower ? 0 : i0, j1 = lower ? i1 : rows;
    tile_product<T>(i1 - i0, n, j1 - j0, a + i0 * rows + j0, rows, 1, w + j0 * w_rs, w_rs, 1, out + i0 * out_rs,
                    out_rs, accumulate);
  }
}

// Causal forward of one head, chunk by chunk: Y = Fq S + tril(Fq Fkᵀ) V straight into the output rows, the
// denominators d_i = φ(q_i)·z + Σ_{j<=i} (Fq Fkᵀ)_ij + eps beside it, then S += Fkᵀ V, z += Σ φ(k_j).
template <class T>
void forward_head(const Problem<T>& P, int64_t bh, T* out, T* den) {
  const int64_t b = bh / P.H, h = bh % P.H, M = P.M, Dv = P.Dv, kend = P.key_end(b);
  Chunk<T> c(M, Dv);
  for (int64_t r0 = 0; r0 < P.N; r0 += kChunk) {
    const int64_t rows = std::min(kChunk, P.N - r0);
    const T* v = P.v.at(b, h, r0);  // read in place, rows P.v.sl apart
    T* y = out + (bh * P.N + r0) * Dv;
    T* d = den + bh * P.N + r0;
    load_features(P, P.q, b, h, r0, rows, P.N, c.fq.data());
    load_features(P, P.k, b, h, r0, rows, kend, c.fk.data());
    tile_product<T>(rows, Dv, M, c.fq.data(), M, 1, c.s.data(), Dv, 1, y, Dv, false);
    auto denominator = [&](int64_t i, const T* ai, int64_t c0, int64_t c1) {
      d[i] = row_dot(c.fq.data() + i * M, c.z.data(), M) + row_sum(ai + c0, c1 - c0) + P.eps;
    };
    triangle_product<T>(rows, true, M, c.fq.data(), M, c.fk.data(), M, c.a.data(), denominator, Dv, v, P.v.sl, y, Dv,
                        true);
    tile_product<T>(M, Dv, rows, c.fk.data(), 1, M, v, P.v.sl, 1, c.s.data(), Dv, true);
    add_rows<T>(c.fk.data(), nullptr, rows, M, c.z.data());
    for (int64_t i = 0; i < rows; ++i) {
      const T inv = T(1) / d[i];
      for (int64_t j = 0; j < Dv; ++j) y[i * Dv + j] *= inv;
    }
  }
}

// ∇q: the prefix pass. ∂L/∂φ(q_i) = S_i gs_i + gz_i z_i with gs_i = G_i / d_i, gz_i = -(G_i · out_i) / d_i and
// S_i, z_i the sums over j <= i; per chunk Gs Sᵀ + gz zᵀ + A Fk, A_ij = gs_i · v_j + gz_i for j <= i. Leaves the
// head's gz_i in gzh [N] for the suffix pass.
template <class T>
void backward_queries(const Problem<T>& P, int64_t bh, const OutputGrad<T>& go, const T* out, const T* den, T* gzh,
                      T* dq) {
  const int64_t b = bh / P.H, h = bh % P.H, M = P.M, Dv = P.Dv, kend = P.key_end(b);
  Chunk<T> c(M, Dv);
  for (int64_t r0 = 0; r0 < P.N; r0 += kChunk) {
    const int64_t rows = std::min(kChunk, P.N - r0);
    const T* v = P.v.at(b, h, r0);  // read in place, rows P.v.sl apart
    T* gz = gzh + r0;
    load_output_grad(P, go, out, den, bh, r0, rows, c.gs.data(), Dv, gz, 1);
    load_features(P, P.k, b, h, r0, rows, kend, c.fk.data());
    tile_product<T>(rows, M, Dv, c.gs.data(), Dv, 1, c.s.data(), 1, Dv, c.grad.data(), M, false);
    for (int64_t i = 0; i < rows; ++i) {
      T* gi = c.grad.data() + i * M;
      for (int64_t m = 0; m < M; ++m) gi[m] += gz[i] * c.z[size_t(m)];
    }
    auto add_gz = [&](int64_t i, T* ai, int64_t c0, int64_t c1) {
      for (int64_t j = c0; j < c1; ++j) ai[j] += gz[i];
    };
    triangle_product<T>(rows, true, Dv, c.gs.data(), Dv, v, P.v.sl, c.a.data(), add_gz, M, c.fk.data(), M,
                        c.grad.data(), M, true);
    tile_product<T>(M, Dv, rows, c.fk.data(), 1, M, v, P.v.sl, 1, c.s.data(), Dv, true);
    add_rows<T>(c.fk.data(), nullptr, rows, M, c.z.data());
    store_query_grad(P, b, h, r0, rows, c, dq + (bh * P.N + r0) * M);
  }
}

// ∇k and ∇v: the suffix pass, with R_j = Σ_{i>=j} φ(q_i) gs_iᵀ and r_j = Σ_{i>=j} gz_i φ(q_i):
// ∂L/∂v_j = R_jᵀ φ(k_j) and ∂L/∂φ(k_j) = R_j v_j + r_j; per chunk Fk R + triu(Fk Fqᵀ) Gs and
// V Rᵀ + 1 rᵀ + A Fq, A_ji = v_j · gs_i + gz_i for i >= j; gz_i from the prefix pass (gzh), which spares a second
// read of the output.
template <class T>
void backward_keys(const Problem<T>& P, int64_t bh, const OutputGrad<T>& go, const T* out, const T* den, const T* gzh,
                   T* dk, T* dv) {
  const int64_t b = bh / P.H, h = bh % P.H, M = P.M, Dv = P.Dv, kend = P.key_end(b);
  Chunk<T> c(M, Dv);
  for (int64_t r0 = (P.L - 1) / kChunk * kChunk; r0 >= 0; r0 -= kChunk) {
    const int64_t rows = std::min(kChunk, P.L - r0);
    const T* v = P.v.at(b, h, r0);  // read in place, rows P.v.sl apart
    T* gv = dv + (bh * P.L + r0) * Dv;
    load_features(P, P.k, b, h, r0, rows, kend, c.fk.data());
    load_features(P, P.q, b, h, r0, rows, P.N, c.fq.data());
    const T* gz = gzh + r0;
    load_output_grad<T>(P, go, out, den, bh, r0, rows, c.gs.data(), Dv, nullptr, 1);
    tile_product<T>(rows, Dv, M, c.fk.data(), M, 1, c.s.data(), Dv, 1, gv, Dv, false);
    auto none = [](int64_t, T*, int64_t, int64_t) {};
    triangle_product<T>(rows, false, M, c.fk.data(), M, c.fq.data(), M, c.a.data(), none, Dv, c.gs.data(), Dv, gv, Dv,
                        true);
    product_with_bias<T>(rows, M, Dv, v, P.v.sl, 1, c.s.data(), 1, Dv, c.grad.data(), M, c.z.data());  // V Rᵀ + 1 rᵀ
    auto add_gz = [&](int64_t, T* aj, int64_t c0, int64_t c1) {
      for (int64_t i = c0; i < c1; ++i) aj[i] += gz[i];
    };
    triangle_product<T>(rows, false, Dv, v, P.v.sl, c.gs.data(), Dv, c.a.data(), add_gz, M, c.fq.data(), M,
                        c.grad.data(), M, true);
    tile_product<T>(M, Dv, rows, c.fq.data(), 1, M, c.gs.data(), Dv, 1, c.s.data(), Dv, true);  // R += Fqᵀ Gs
    add_rows(c.fq.data(), gz, rows, M, c.z.data());                                   // r += Fqᵀ gz
    store_input_grad(P, P.k, b, h, r0, rows, kend, c.fk.data(), c.grad.data(), dk + (bh * P.L + r0) * M);
  }
}

// Non-causal, one head: whole-sequence products over buffers of φ(Q), φ(K) [N, M] and V⁺, G⁺ [N, E]. The
// buffers cost O(N·(M + E)) per thread while a head runs (tensors, so the allocator counts them); in exchange
// every product has K = N or M = N and runs near the GEMM's peak, where 64-row chunks would not.
template <class T>
struct WholeHead {
  const Problem<T>& P;
  int64_t bh, b, h;
  Tensor fq, fk, ve, s;  // φ(Q) [N, M], φ(K) [L, M], V⁺ [L, E], S⁺ = φ(K)ᵀ V⁺ [M, E]
  WholeHead(const Problem<T>& p, int64_t bh_)
      : P(p), bh(bh_), b(bh_ / p.H), h(bh_ % p.H), fq(empty({p.N, p.M}, p.dtype)), fk(empty({p.L, p.M}, p.dtype)),
        ve(empty({p.L, p.E}, p.dtype)), s(empty({p.M, p.E}, p.dtype)) {
    load_features(P, P.q, b, h, 0, P.N, P.N, fq.data<T>());
    load_features(P, P.k, b, h, 0, P.L, P.key_end(b), fk.data<T>());
    load_values(P, b, h, 0, P.L, ve.data<T>());
    tile_product<T>(P.M, P.E, P.L, fk.data<T>(), 1, P.M, ve.data<T>(), P.E, 1, s.data<T>(), P.E, false);
  }
};

template <class T>
void forward_whole(const Problem<T>& P, int64_t bh, T* out, T* den) {
  WholeHead<T> w(P, bh);
  Tensor y = empty({P.N, P.E}, P.dtype);
  tile_product<T>(P.N, P.E, P.M, w.fq.template data<T>(), P.M, 1, w.s.template data<T>(), P.E, 1, y.data<T>(), P.E,
                  false);  // Y = φ(Q) S⁺
  store_output(P, bh, 0, P.N, y.data<T>(), out, den);
}

// ∂L/∂φ(Q) = G⁺ S⁺ᵀ; with R⁺ = φ(Q)ᵀ G⁺: ∂L/∂φ(K) = V⁺ R⁺ᵀ and ∂L/∂V⁺ = φ(K) R⁺.
template <class T>
void backward_whole(const Problem<T>& P, int64_t bh, const OutputGrad<T>& go, const T* out, const T* den, T* dq, T* dk,
                    T* dv) {
  WholeHead<T> w(P, bh);
  const int64_t N = P.N, L = P.L, M = P.M, E = P.E;
  const T *fq = w.fq.template data<T>(), *fk = w.fk.template data<T>(), *ve = w.ve.template data<T>();
  Tensor ge = empty({N, E}, P.dtype), r = empty({M, E}, P.dtype), gf = empty({std::max(N, L), M}, P.dtype);
  Tensor gv = empty({L, E}, P.dtype);
  load_output_grad(P, go, out, den, bh, 0, N, ge.data<T>(), E, ge.data<T>() + P.Dv, E);
  tile_product<T>(N, M, E, ge.data<T>(), E, 1, w.s.template data<T>(), 1, E, gf.data<T>(), M, false);
  store_input_grad(P, P.q, w.b, w.h, 0, N, N, fq, gf.data<T>(), dq + bh * N * M);
  tile_product<T>(M, E, N, fq, 1, M, ge.data<T>(), E, 1, r.data<T>(), E, false);
  tile_product<T>(L, M, E, ve, E, 1, r.data<T>(), 1, E, gf.data<T>(), M, false);
  store_input_grad(P, P.k, w.b, w.h, 0, L, P.key_end(w.b), fk, gf.data<T>(), dk + bh * L * M);
  tile_product<T>(L, E, M, fk, M, 1, r.data<T>(), E, 1, gv.data<T>(), E, false);
  store_values_grad(P, bh, 0, L, gv.data<T>(), dv);
}

template <class T>
Problem<T> make_problem(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionArgs& args) {
  Problem<T> P;
  P.B = q.size(0), P.H = q.size(1), P.N = q.size(2), P.L = k.size(2), P.M = q.size(3), P.Dv = v.size(3);
  P.E = P.Dv + 1;
  P.dtype = q.dtype();
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
  if (on_cuda(q)) return cuda_op::linear_attention(q, k, v, args, causal);
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), Dv = v.size(3);
  Tensor qd = rows_contiguous(q), kd = rows_contiguous(k), vd = rows_contiguous(v);
  Tensor out = empty({B, H, N, Dv}, q.dtype());
  Tensor den = empty({B, H, N}, q.dtype());
  ENG_DISPATCH(q.dtype(), T, {
    const Problem<T> P = make_problem<T>(qd, kd, vd, args);
    T* o = out.data<T>();
    T* d = den.data<T>();
    parallel_for(0, B * H, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t bh = lo; bh < hi; ++bh) causal ? forward_head(P, bh, o, d) : forward_whole(P, bh, o, d);
    });
  });
  return record(out, op, {q, k, v}, [qd, kd, vd, args, causal, o = out.detach(), den](const Tensor& grad) {
    Tensor dq = empty(qd.shape(), qd.dtype()), dk = empty(kd.shape(), kd.dtype()), dv = empty(vd.shape(), vd.dtype());
    ENG_DISPATCH(qd.dtype(), T, {
      const Problem<T> P = make_problem<T>(qd, kd, vd, args);
      const OutputGrad<T> g{rows_of<T>(grad), grad.strides()[3]};
      const T *op_out = o.data<T>(), *d = den.data<T>();
      if (causal) {  // one task per head: the suffix pass reads the gz the prefix pass left ([B, H, N], as den)
        Tensor gz = empty({P.B, P.H, P.N}, qd.dtype());
        parallel_for(0, P.B * P.H, 1, [&](int64_t lo, int64_t hi) {
          for (int64_t bh = lo; bh < hi; ++bh) {
            backward_queries(P, bh, g, op_out, d, gz.data<T>() + bh * P.N, dq.data<T>());
            backward_keys(P, bh, g, op_out, d, gz.data<T>() + bh * P.N, dk.data<T>(), dv.data<T>());
          }
        });
      } else {
        parallel_for(0, P.B * P.H, 1, [&](int64_t lo, int64_t hi) {
          for (int64_t bh = lo; bh < hi; ++bh)
            backward_whole(P, bh, g, op_out, d, dq.data<T>(), dk.data<T>(), dv.data<T>());
        });
      }
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

namespace {

constexpr int64_t kStepBlock = 64;  // state columns per block of the step

// The state of a head is a few pages read once per token, each page too short for the hardware prefetcher to
// learn (1 MiB per layer at batch 32 misses the caches on every token): row m of the next head is asked for while
// row m of this one is updated.
template <class S>
void prefetch_for_write(const S* p, int64_t n) {
  for (int64_t i = 0; i < n; i += int64_t(64 / sizeof(S))) __builtin_prefetch(p + i, 1);
}

// One step for every (b, h): the state (type S) absorbs k and v, then is read for q; sums in S.
template <class T, class S>
void step_heads(const Tensor& qd, const Tensor& kd, const Tensor& vd, Tensor& s, Tensor& z, Tensor& out,
                const LinearAttentionArgs& args, bool update) {
  const int64_t B = qd.size(0), H = qd.size(1), M = qd.size(3), Dv = s.size(3);
  const Rows<T> qr = rows_of<T>(qd);
  Rows<T> kr, vr;
  if (update) kr = rows_of<T>(kd), vr = rows_of<T>(vd);
  S* st = s.data<S>();
  S* zt = z.data<S>();
  T* o = out.data<T>();
  parallel_for(0, B * H, std::max<int64_t>(1, 4096 / std::max<int64_t>(M * Dv, 1)), [&](int64_t lo, int64_t hi) {
    std::vector<T> fk(static_cast<size_t>(M)), fq(static_cast<size_t>(M));
    Problem<T> P;  // what load_features reads: the map and the width
    P.f = args.feature, P.M = M;
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      S* sh = st + bh * M * Dv;
      S* zh = zt + bh * M;
      // One pass over the state: row m of s (and z_m) is updated, s += φ(k) vᵀ, z += φ(k) (Eq. 18–19), then
      // read for φ(q)ᵀ s / (φ(q)ᵀ z + eps) (Eq. 20). No row depends on another, so this equals two passes.
      // The features first, by the row kernels the parallel form uses, so that the loops below are plain FMAs.
      const T* vv = update ? vr.at(b, h, 0) : nullptr;
      if (update) load_features(P, kr, b, h, 0, 1, 1, fk.data());
      load_features(P, qr, b, h, 0, 1, 1, fq.data());
      S d = S(args.eps);
      for (int64_t m = 0; m < M; ++m) {
        if (update) zh[m] += S(fk[size_t(m)]);
        d += S(fq[size_t(m)]) * zh[m];
      }
      // Columns in blocks held in local arrays, which nothing else can alias: the loops compile to plain vector FMAs
      // with the sums in registers, where a v or sum that might overlap the state was reloaded each row.
      T* oh = o + bh * Dv;
      for (int64_t j0 = 0; j0 < Dv; j0 += kStepBlock) {
        const int64_t w = std::min(kStepBlock, Dv - j0);
        S vb[kStepBlock], acc[kStepBlock] = {};
        if (update)
          for (int64_t j = 0; j < w; ++j) vb[j] = S(vv[j0 + j]);
        for (int64_t m = 0; m < M; ++m) {
          S* row = sh + m * Dv + j0;
          if (bh + 1 < hi) prefetch_for_write(row + M * Dv, w);
          if (update) {
            const S fkm = S(fk[size_t(m)]);
            for (int64_t j = 0; j < w; ++j) row[j] += fkm * vb[j];
          }
          const S fqm = S(fq[size_t(m)]);
          for (int64_t j = 0; j < w; ++j) acc[j] += fqm * row[j];
        }
        for (int64_t j = 0; j < w; ++j) oh[j0 + j] = T(acc[j] / d);
      }
    }
  });
}

}  // namespace

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
  const bool wide = s.dtype() == DType::F64 && q.dtype() == DType::F32 && !on_cuda(q);
  ENG_CHECK((s.dtype() == q.dtype() || wide) && z.dtype() == s.dtype() && s.is_contiguous() && z.is_contiguous(), op,
            ": the state must be contiguous and of q's dtype (or f64 for an f32 q on the CPU)");
  const int64_t Dv = s.size(3);
  if (update) {
    check_qkv(q, k, v, op);
    ENG_CHECK(k.size(2) == 1 && v.size(3) == Dv, op, ": k ", k.shape(), " and v ", v.shape(),
              " must be one position matching the state s ", s.shape());
  }
  ENG_CHECK(args.key_lengths.empty(), op, ": key padding has no meaning for one step");
  NoGradGuard no_grad;
  if (on_cuda(q)) return cuda_op::linear_attention_step(q, k, v, s, z, args);
  Tensor qd = rows_contiguous(q), kd = update ? rows_contiguous(k) : Tensor(), vd = update ? rows_contiguous(v) : Tensor();
  Tensor out = empty({B, H, 1, Dv}, q.dtype());
  if (wide) {
    step_heads<float, double>(qd, kd, vd, s, z, out, args, update);
  } else {
    ENG_DISPATCH(q.dtype(), T, { step_heads<T, T>(qd, kd, vd, s, z, out, args, update); });
  }
  return out;
}

}  // namespace eng
