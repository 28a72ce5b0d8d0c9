// Causal linear attention (Katharopoulos et al. 2020), the GPU twin of the causal kernel of
// ops/linear_attention.h, with the elu + 1 feature map (or the identity) applied inside the kernels:
//
//   out_i = num_i / den_i,  num_i = S_iᵀ φ(q_i),  den_i = φ(q_i)ᵀ z_i + eps,
//   S_i = Σ_{j<=i} φ(k_j) v_jᵀ [M, Dv],  z_i = Σ_{j<=i} φ(k_j) [M].
//
// Gradients, with g_i = ∂L/∂out_i, u_i = g_i / den_i and c_i = ∂L/∂den_i = −(g_i · out_i) / den_i:
//
//   ∂L/∂φ(q_i) = S_i u_i + c_i z_i                                  (prefix sums: the states S_i, z_i)
//   ∂L/∂φ(k_j) = R_j v_j + r_j,  ∂L/∂v_j = R_jᵀ φ(k_j),              (suffix sums)
//   R_j = Σ_{i>=j} φ(q_i) u_iᵀ [M, Dv],  r_j = Σ_{i>=j} c_i φ(q_i) [M],
//
// then ∂L/∂x = ∂L/∂φ(x) φ'(x), φ'(x) = 1 for x > 0, else exp(x) = φ(x). This is the paper's Algorithm 1.
//
// One kernel, `linear_scan_kernel`, computes all four products. With rows X_i, Y_j, Z_j it walks the
// positions in chunks of C = 32, forward or backward in time, keeping a state T = Σ Y_jᵀ Z_j of the chunks
// already passed:
//
//   O_i = X_i T + Σ_{j in the chunk, j <= i (or j >= i backward)} (X_i · Y_j) Z_j,   then T += Y_chunkᵀ Z_chunk.
//
//   pass     X         Y         Z              O
//   Forward  φ(q)      φ(k)      [v, 1]         [num, den − eps]   (the state is [S, z])
//   GradQ    [u, c]    [v, 1]    φ(k)           ∂L/∂φ(q)           (the state is [S, z]ᵀ)
//   GradK    [v, 1]    [u, c]    φ(q)           ∂L/∂φ(k)  backward (the state is [R, r]ᵀ)
//   GradV    φ(k)      φ(q)      u              ∂L/∂v     backward (the state is R)
//
// A block owns one (b, h) and a slice of 32 columns of Z (plus, in the forward, the column of ones that
// yields the denominator), so the heads and the column slices run in parallel; each block recomputes the
// chunk's C x C product X Yᵀ. Memory: the state [M or Dv + 1, 40] and the chunk's rows in shared memory,
// never the N states; the backward adds den_i and c_i (2 floats per position).
#include <cmath>

#include "engine/cuda.h"
#include "engine/error.h"
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"

namespace eng::cuda {
namespace {

constexpr int kChunk = 32;             // positions per chunk
constexpr int kSlice = 32;             // columns of Z per block; column kSlice is the forward's ones
constexpr int kWide = kSlice + 8;      // row stride of the Z, state, output and C x C tiles (see below)
constexpr int kScanThreads = 256;      // thread t: chunk row t / 8, columns t % 8 + 8u
constexpr int64_t kMaxFeatures = 128;  // M, and Dv in the backward: chunk rows of M or Dv + 1 are staged

// Row stride of staged X, Y rows of n values: n, made odd, so that lanes reading one column of different
// rows hit different banks.
__host__ __device__ int odd_stride(int64_t n) { return int(n) | 1; }

enum class Pass { Forward, GradQ, GradK, GradV };
enum class Operand { FeatQ, FeatK, ValuesPlus, GradPlus, GradScaled };

struct ScanArgs {
  const float *q, *k, *v;   // [BH, N, M], [BH, N, M], [BH, N, Dv]
  const float* dout;        // [BH, N, Dv] (backward)
  const float *den, *dden;  // [BH, N]: den_i and c_i = ∂L/∂den_i (backward)
  float* dst;               // [BH, N, columns(P)]
  int64_t N, M, Dv;
  float eps;
  bool elu;
};

__device__ float feature(float x, bool elu) { return !elu ? x : x > 0.f ? x + 1.f : expf(x); }
__device__ float feature_slope(float x, bool elu) { return !elu || x > 0.f ? 1.f : expf(x); }

// Element `col` of row `row` (= bh N + position) of an operand: φ(q), φ(k), [v, 1], [u, c] or u.
template <Operand O>
__device__ float operand(const ScanArgs& a, int64_t row, int64_t col) {
  if constexpr (O == Operand::FeatQ) return feature(a.q[row * a.M + col], a.elu);
  else if constexpr (O == Operand::FeatK) return feature(a.k[row * a.M + col], a.elu);
  else if constexpr (O == Operand::ValuesPlus) return col < a.Dv ? a.v[row * a.Dv + col] : 1.f;
  else if constexpr (O == Operand::GradPlus) return col < a.Dv ? a.dout[row * a.Dv + col] / a.den[row] : a.dden[row];
  else return a.dout[row * a.Dv + col] / a.den[row];
}

template <Pass P>
struct Scan;
template <>
struct Scan<Pass::Forward> {
  static constexpr Operand X = Operand::FeatQ, Y = Operand::FeatK, Z = Operand::ValuesPlus;
  static constexpr bool backward = false;
};
template <>
struct Scan<Pass::GradQ> {
  static constexpr Operand X = Operand::GradPlus, Y = Operand::ValuesPlus, Z = Operand::FeatK;
  static constexpr bool backward = false;
};
template <>
struct Scan<Pass::GradK> {
  static constexpr Operand X = Operand::ValuesPlus, Y = Operand::GradPlus, Z = Operand::FeatQ;
  static constexpr bool backward = true;
};
template <>
struct Scan<Pass::GradV> {
  static constexpr Operand X = Operand::FeatK, Y = Operand::FeatQ, Z = Operand::GradScaled;
  static constexpr bool backward = true;
};

// Length of the X, Y rows (the state's rows) and number of Z columns (the outputs' columns).
template <Pass P>
__host__ __device__ int64_t inner(const ScanArgs& a) {
  return P == Pass::GradQ || P == Pass::GradK ? a.Dv + 1 : a.M;
}
template <Pass P>
__host__ __device__ int64_t columns(const ScanArgs& a) {
  return P == Pass::GradQ || P == Pass::GradK ? a.M : a.Dv;
}

// Shared floats of one block: X and Y chunks [C, odd(R)]; Z chunk, C x C product, outputs [C, kWide];
// state [R, kWide].
int64_t scan_floats(int64_t R) { return 2 * kChunk * odd_stride(R) + 3 * kChunk * kWide + R * kWide; }

// dst [C, stride] = operand O of positions pos0 .. pos0 + rows, columns [0, n); zero rows past `rows`
// (never φ(0) = 1, which would add a phantom position to the state).
template <Operand O>
__device__ void stage(const ScanArgs& a, float* dst, int stride, int64_t row0, int rows, int64_t n) {
  const int c = int(n);
  for (int e = threadIdx.x; e < kChunk * c; e += blockDim.x) {
    const int i = e / c, col = e % c;
    dst[i * stride + col] = i < rows ? operand<O>(a, row0 + i, col) : 0.f;
  }
}

// Block per (b h, column slice); see the header comment. Thread t computes the C x C product entries
// (t / 8, t % 8 + 8u), u < 4, and the output entries (t / 8, t % 8 + 8u), u < 5 (columns 33..39 are zero
// padding, so no thread needs a bounds test). kWide = 40 puts rows t / 8 of a warp 8 banks apart.
template <Pass P>
__global__ void __launch_bounds__(kScanThreads) linear_scan_kernel(ScanArgs a, int64_t slices) {
  using S = Scan<P>;
  extern __shared__ float smem[];
  const int64_t R = inner<P>(a), cols = columns<P>(a);
  const int xs = odd_stride(R);
  float* Xs = smem;
  float* Ys = Xs + kChunk * xs;
  float* Zs = Ys + kChunk * xs;
  float* As = Zs + kChunk * kWide;
  float* Os = As + kChunk * kWide;
  float* Ts = Os + kChunk * kWide;
  const int64_t bh = blockIdx.x / slices, c0 = blockIdx.x % slices * kSlice;
  const int t = threadIdx.x, ti = t / 8, tc = t % 8;
  for (int e = t; e < int(R) * kWide; e += blockDim.x) Ts[e] = 0.f;
  const int64_t chunks = (a.N + kChunk - 1) / kChunk;
  for (int64_t step = 0; step < chunks; ++step) {
    const int64_t pos0 = (S::backward ? chunks - 1 - step : step) * kChunk, row0 = bh * a.N + pos0;
    const int rows = int(min(int64_t(kChunk), a.N - pos0));
    stage<S::X>(a, Xs, xs, row0, rows, R);
    stage<S::Y>(a, Ys, xs, row0, rows, R);
    // Z: columns c0 .. c0 + 31 of the operand, then the forward's ones, then zeros
    for (int e = t; e < kChunk * kWide; e += blockDim.x) {
      const int i = e / kWide, lc = e % kWide;
      float z = 0.f;
      if (i < rows && lc < kSlice && c0 + lc < cols) z = operand<S::Z>(a, row0 + i, c0 + lc);
      if (i < rows && lc == kSlice && P == Pass::Forward) z = 1.f;
      Zs[e] = z;
    }
    __syncthreads();
    // A = X Yᵀ within the chunk, causal: j <= i forward in time, j >= i backward
    {
      float acc[4] = {};
      for (int r = 0; r < int(R); ++r) {
        const float x = Xs[ti * xs + r];
#pragma unroll
        for (int u = 0; u < 4; ++u) acc[u] = fmaf(x, Ys[(tc + 8 * u) * xs + r], acc[u]);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int j = tc + 8 * u;
        As[ti * kWide + j] = (S::backward ? j >= ti : j <= ti) ? acc[u] : 0.f;
      }
    }
    __syncthreads();
    // O = X T + A Z
    {
      float acc[5] = {};
      for (int r = 0; r < int(R); ++r) {
        const float x = Xs[ti * xs + r];
#pragma unroll
        for (int u = 0; u < 5; ++u) acc[u] = fmaf(x, Ts[r * kWide + tc + 8 * u], acc[u]);
      }
      for (int j = 0; j < kChunk; ++j) {
        const float w = As[ti * kWide + j];
#pragma unroll
        for (int u = 0; u < 5; ++u) acc[u] = fmaf(w, Zs[j * kWide + tc + 8 * u], acc[u]);
      }
#pragma unroll
      for (int u = 0; u < 5; ++u) Os[ti * kWide + tc + 8 * u] = acc[u];
    }
    __syncthreads();
    // The outputs of the chunk, and T += Yᵀ Z (columns 0 .. kSlice; the padding stays zero)
    for (int e = t; e < kChunk * kSlice; e += blockDim.x) {
      const int i = e / kSlice, lc = e % kSlice;
      const int64_t col = c0 + lc, row = row0 + i;
      if (i >= rows || col >= cols) continue;
      const float o = Os[i * kWide + lc];
      float* d = a.dst + row * cols + col;
      if constexpr (P == Pass::Forward) *d = o / (Os[i * kWide + kSlice] + a.eps);
      else if constexpr (P == Pass::GradQ) *d = o * feature_slope(a.q[row * a.M + col], a.elu);
      else if constexpr (P == Pass::GradK) *d = o * feature_slope(a.k[row * a.M + col], a.elu);
      else *d = o;
    }
    for (int e = t; e < int(R) * (kSlice + 1); e += blockDim.x) {
      const int r = e / (kSlice + 1), lc = e % (kSlice + 1);
      float acc = Ts[r * kWide + lc];
      for (int j = 0; j < kChunk; ++j) acc = fmaf(Ys[j * xs + r], Zs[j * kWide + lc], acc);
      Ts[r * kWide + lc] = acc;
    }
    __syncthreads();  // before the next chunk overwrites X, Y, Z and O
  }
}

// Block per (b, h), thread m keeps z_m (M <= 128 threads). Per chunk: thread m turns column m of the
// staged φ(k) rows into the running z_i[m] (in order), then warp w computes, for rows w, w + 4, ...,
// den_i = φ(q_i) · z_i + eps and c_i = −(g_i · out_i) / den_i.
__global__ void __launch_bounds__(128) linear_den_kernel(ScanArgs a, const float* out, float* den, float* dden) {
  __shared__ float fq[kChunk][kMaxFeatures + 1], zs[kChunk][kMaxFeatures + 1];
  const int64_t bh = blockIdx.x;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int M = int(a.M);
  float z = 0.f;
  for (int64_t pos0 = 0; pos0 < a.N; pos0 += kChunk) {
    const int rows = int(min(int64_t(kChunk), a.N - pos0));
    const int64_t row0 = bh * a.N + pos0;
    for (int e = t; e < rows * M; e += blockDim.x) {
      fq[e / M][e % M] = operand<Operand::FeatQ>(a, row0 + e / M, e % M);
      zs[e / M][e % M] = operand<Operand::FeatK>(a, row0 + e / M, e % M);
    }
    __syncthreads();
    if (t < M)
      for (int i = 0; i < rows; ++i) {
        z += zs[i][t];
        zs[i][t] = z;
      }
    __syncthreads();
    for (int i = warp; i < rows; i += blockDim.x / 32) {
      const int64_t row = row0 + i;
      float d = 0.f, g = 0.f;
      for (int m = lane; m < M; m += 32) d += fq[i][m] * zs[i][m];
      for (int64_t e = lane; e < a.Dv; e += 32) g += a.dout[row * a.Dv + e] * out[row * a.Dv + e];
      d = warp_reduce(d, SumOp{}) + a.eps;
      g = warp_reduce(g, SumOp{});
      if (lane == 0) {
        den[row] = d;
        dden[row] = -g / d;
      }
    }
    __syncthreads();  // before the next chunk overwrites fq and zs
  }
}

// Block per (b, h): z += φ(k) (thread per m) and den = φ(q) · z + eps (a block sum); then thread per
// column e: s[m, e] += φ(k_m) v_e and num_e = Σ_m φ(q_m) s[m, e], each s entry read and written once. The
// features are recomputed per column (cheap beside the state's M Dv reads and writes).
__global__ void linear_step_kernel(const float* q, const float* k, const float* v, float* s, float* z, float* out,
                                   int64_t M, int64_t Dv, float eps, bool elu) {
  const int64_t bh = blockIdx.x;
  q += bh * M, z += bh * M, s += bh * M * Dv, out += bh * Dv;
  if (k) k += bh * M, v += bh * Dv;
  float part = 0.f;
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
    float zm = z[m];
    if (k) {
      zm += feature(k[m], elu);
      z[m] = zm;
    }
    part += feature(q[m], elu) * zm;
  }
  const float den = block_reduce(part, SumOp{}, 0.f) + eps;
  for (int64_t e = threadIdx.x; e < Dv; e += blockDim.x) {
    float num = 0.f;
    for (int64_t m = 0; m < M; ++m) {
      float se = s[m * Dv + e];
      if (k) {
        se += feature(k[m], elu) * v[e];
        s[m * Dv + e] = se;
      }
      num += feature(q[m], elu) * se;
    }
    out[e] = num / den;
  }
}

constexpr int64_t kMaxGridX = (int64_t(1) << 31) - 1;

template <Pass P>
void scan(const ScanArgs& a, int64_t BH, const char* name) {
  const int64_t cols = columns<P>(a), slices = ceil_div(cols, kSlice);
  if (BH == 0 || a.N == 0 || cols == 0) return;
  ENG_CHECK(BH * slices <= kMaxGridX, name, ": ", BH, " heads are too many blocks for one launch");
  const int64_t floats = scan_floats(inner<P>(a));
  allow_shared(linear_scan_kernel<P>, floats, name);
  linear_scan_kernel<P><<<unsigned(BH * slices), kScanThreads, size_t(floats) * sizeof(float)>>>(a, slices);
  check_launch(name);
}

void check_sizes(const char* op, int64_t B, int64_t H, int64_t N, int64_t M, int64_t Dv, float eps) {
  ENG_CHECK(B >= 0 && H >= 0 && N >= 0 && M >= 0 && Dv >= 0, op, ": negative size B=", B, " H=", H, " N=", N,
            " M=", M, " Dv=", Dv);
  ENG_CHECK(eps >= 0 && std::isfinite(eps), op, ": eps must be finite and >= 0, got ", eps);
  ENG_CHECK(B * H <= kMaxGridX, op, ": ", B * H, " heads are too many blocks for one launch");
}

}  // namespace

void causal_linear_attention_forward(const float* q, const float* k, const float* v, float* out, int64_t B, int64_t H,
                                     int64_t N, int64_t M, int64_t Dv, float eps, bool elu_feature) {
  const char* op = "cuda::causal_linear_attention_forward";
  check_sizes(op, B, H, N, M, Dv, eps);
  ENG_CHECK(M <= kMaxFeatures, op, ": feature size M = ", M, " must be at most ", kMaxFeatures,
            " (the chunk's rows are staged in shared memory)");
  scan<Pass::Forward>(ScanArgs{q, k, v, nullptr, nullptr, nullptr, out, N, M, Dv, eps, elu_feature}, B * H,
                      "linear_scan_kernel<Forward>");
}

void causal_linear_attention_backward(const float* q, const float* k, const float* v, const float* out,
                                      const float* dout, float* dq, float* dk, float* dv, int64_t B, int64_t H,
                                      int64_t N, int64_t M, int64_t Dv, float eps, bool elu_feature) {
  const char* op = "cuda::causal_linear_attention_backward";
  check_sizes(op, B, H, N, M, Dv, eps);
  ENG_CHECK(M <= kMaxFeatures && Dv <= kMaxFeatures, op, ": M = ", M, " and Dv = ", Dv,
            " must be at most ", kMaxFeatures, " (the chunk's rows are staged in shared memory)");
  const int64_t BH = B * H;
  if (BH * N == 0) return;
  Scratch den(BH * N), dden(BH * N);
  ScanArgs a{q, k, v, dout, den.get(), dden.get(), nullptr, N, M, Dv, eps, elu_feature};
  linear_den_kernel<<<unsigned(BH), 128>>>(a, out, den.get(), dden.get());
  check_launch("linear_den_kernel");
  a.dst = dq;
  scan<Pass::GradQ>(a, BH, "linear_scan_kernel<GradQ>");
  a.dst = dk;
  scan<Pass::GradK>(a, BH, "linear_scan_kernel<GradK>");
  a.dst = dv;
  scan<Pass::GradV>(a, BH, "linear_scan_kernel<GradV>");
}

void linear_attention_step(const float* q, const float* k, const float* v, float* s, float* z, float* out, int64_t B,
                           int64_t H, int64_t M, int64_t Dv, float eps, bool elu_feature) {
  const char* op = "cuda::linear_attention_step";
  check_sizes(op, B, H, 1, M, Dv, eps);
  if (B * H == 0) return;
  linear_step_kernel<<<unsigned(B * H), 128>>>(q, k, v, s, z, out, M, Dv, eps, elu_feature);
  check_launch("linear_step_kernel");
}

}  // namespace eng::cuda
