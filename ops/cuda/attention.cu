// Fused softmax attention in the style of FlashAttention (Dao et al. 2022), the GPU twin of the CPU op
// ops/attention_flash.h: out = softmax(q k^T scale + causal mask) v without the Lq x Lk matrix.
//
// Tiles: a block of 256 threads owns 64 rows (queries, or keys in the dK/dV kernel), 4 threads per row. The
// 4 threads of a row are consecutive lanes of one warp, so row maxima and sums are two xor shuffles and the
// row's slice of a 64-wide tile is shared through shared memory after a __syncwarp. Thread p of row r holds
// tile columns p, p + 4, ..., p + 60 of the logits and output columns p, p + 4, ... in registers. Operand
// tiles [64, D] are staged in shared memory with an odd row stride, so lanes reading one column of
// different rows hit different banks; D and Dv are at most 128 (kMaxHead).
//
// Forward: online softmax over key tiles, a running max m and sum l per query row, the output rescaled by
// exp(m_old - m_new) when m grows; it saves lse = m + log l. Causal key tiles after the diagonal are not
// visited. Backward: delta_i = rowsum(dO_i O_i), then P = exp(S - lse) recomputed per tile and
// dS = P (dP - delta) with dP = dO V^T. Deterministic without atomics: one kernel per key block owns its
// dK, dV rows and loops over the query blocks in order; another per query block owns its dQ rows and loops
// over the key blocks in order. Every gradient row is written by one thread group, in a fixed order.
#include <cmath>

#include "engine/cuda.h"
#include "engine/error.h"
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"

namespace eng::cuda {
namespace {

constexpr int kRows = 64;               // queries per query block, keys per key block
constexpr int kFlashThreads = 256;      // 4 per row
constexpr int kPerThread = kRows / 4;   // tile columns per thread
constexpr int kTileStride = kRows + 4;  // row stride of the P / dS tiles: row r starts at bank 4r mod 32
constexpr int64_t kMaxHead = 128;

// Row stride of a staged [64, n] operand tile: n, made odd (see the header comment).
__host__ __device__ int odd_stride(int64_t n) { return int(n) | 1; }

struct FlashArgs {
  const float *q, *k, *v;    // [BH, Lq, D], [BH, Lk, D], [BH, Lk, Dv]
  const float *out, *dout;   // [BH, Lq, Dv] (backward)
  const float *lse, *delta;  // [BH, Lq] (backward)
  int64_t Lq, Lk, D, Dv;
  float scale;
  bool causal;
  int64_t query_offset;
  int64_t q_blocks, k_blocks;  // ceil(Lq / 64), ceil(Lk / 64)
};

// Query i (absolute position i + query_offset) sees key j.
__device__ bool visible(const FlashArgs& a, int64_t i, int64_t j) {
  return i < a.Lq && j < a.Lk && (!a.causal || j <= i + a.query_offset);
}

// Queries up to i_last see no key at or after this.
__device__ int64_t key_end(const FlashArgs& a, int64_t i_last) {
  if (!a.causal) return a.Lk;
  const int64_t end = i_last + a.query_offset + 1;
  return end < 0 ? 0 : end > a.Lk ? a.Lk : end;
}

__device__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
// Addition commutes, so all 4 lanes get the same bits.
__device__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// dst [64, stride] = rows [0, n) of src [.., cols], zeros in rows [n, 64). Consecutive threads read
// consecutive addresses. Every thread of the block takes part.
__device__ void load_rows(float* dst, int stride, const float* src, int n, int64_t cols) {
  const int c = int(cols);
  for (int e = threadIdx.x; e < kRows * c; e += blockDim.x) {
    const int row = e / c, col = e % c;
    dst[row * stride + col] = row < n ? src[int64_t(row) * cols + col] : 0.f;
  }
}

// s[c] = a . b_c over n elements, with b_c = b + c * step: one staged row against the thread's 16 rows
// of another tile, in a fixed order.
__device__ void dot_rows(const float* a, const float* b, int step, int64_t n, float (&s)[kPerThread]) {
#pragma unroll
  for (int c = 0; c < kPerThread; ++c) s[c] = 0.f;
  for (int d = 0; d < int(n); ++d) {
    const float x = a[d];
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) s[c] = fmaf(x, b[c * step + d], s[c]);
  }
}

// acc[c] += sum over j < n of w[j] tile[j, p + 4c], for the columns p + 4c < cols: a row of P (or dS)
// times a staged tile, keys (or queries) in order.
template <int kDim>
__device__ void accumulate(const float* w, int n, const float* tile, int stride, int p, int64_t cols,
                           float (&acc)[kDim / 4]) {
  for (int j = 0; j < n; ++j) {
    const float x = w[j];
    const float* row = tile + j * stride + p;
#pragma unroll
    for (int c = 0; c < kDim / 4; ++c)
      if (p + 4 * c < cols) acc[c] = fmaf(x, row[4 * c], acc[c]);
  }
}

template <int kDim>
__device__ void store_row(float* dst, int p, int64_t cols, const float (&acc)[kDim / 4], float mul) {
#pragma unroll
  for (int c = 0; c < kDim / 4; ++c)
    if (p + 4 * c < cols) dst[p + 4 * c] = acc[c] * mul;
}

// Block per (head, query block), the latest query blocks (the longest causal rows) first. Thread (r, p):
// query i0 + r, logits against keys j0 + p + 4c of each tile, output columns p + 4c.
template <int kDim>
__global__ void __launch_bounds__(kFlashThreads) flash_forward_kernel(FlashArgs a, float* out, float* lse) {
  extern __shared__ float smem[];
  const int ds = odd_stride(a.D), vs = odd_stride(a.Dv);
  float* Qs = smem;
  float* Ks = Qs + kRows * ds;
  float* Vs = Ks + kRows * ds;
  float* Ps = Vs + kRows * vs;
  const int64_t bh = blockIdx.x / a.q_blocks, i0 = (a.q_blocks - 1 - blockIdx.x % a.q_blocks) * kRows;
  const int nq = int(min(int64_t(kRows), a.Lq - i0));
  const int r = threadIdx.x / 4, p = threadIdx.x % 4;
  const int64_t i = i0 + r;
  load_rows(Qs, ds, a.q + (bh * a.Lq + i0) * a.D, nq, a.D);
  float m = -INFINITY, l = 0.f, acc[kDim / 4] = {};
  const int64_t kend = key_end(a, i0 + nq - 1);
  for (int64_t j0 = 0; j0 < kend; j0 += kRows) {
    const int nk = int(min(int64_t(kRows), a.Lk - j0));
    __syncthreads();  // the previous tile has been read
    load_rows(Ks, ds, a.k + (bh * a.Lk + j0) * a.D, nk, a.D);
    load_rows(Vs, vs, a.v + (bh * a.Lk + j0) * a.Dv, nk, a.Dv);
    __syncthreads();
    float s[kPerThread];
    dot_rows(Qs + r * ds, Ks + p * ds, 4 * ds, a.D, s);
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      s[c] = visible(a, i, j0 + p + 4 * c) ? s[c] * a.scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[c]);
    }
    const float m_new = fmaxf(m, quad_max(tile_max));
    // A row that has seen no key yet keeps m = -inf and weights 0: exp(-inf - -inf) would be NaN.
    const bool none = m_new == -INFINITY;
    const float alpha = none ? 1.f : expf(m - m_new);
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      const float w = none ? 0.f : expf(s[c] - m_new);
      sum += w;
      Ps[r * kTileStride + p + 4 * c] = w;
    }
    l = l * alpha + quad_sum(sum);
    m = m_new;
    __syncwarp();  // the row's 4 threads share its weights
#pragma unroll
    for (int c = 0; c < kDim / 4; ++c) acc[c] *= alpha;
    accumulate<kDim>(Ps + r * kTileStride, nk, Vs, vs, p, a.Dv, acc);
  }
  if (i >= a.Lq) return;
  // l >= 1 once a key is seen (the maximum contributes exp(0)); a row that saw none gives 0 and -inf.
  store_row<kDim>(out + (bh * a.Lq + i) * a.Dv, p, a.Dv, acc, l > 0.f ? 1.f / l : 0.f);
  if (p == 0) lse[bh * a.Lq + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

// Warp per row: delta[row] = sum over e of dout[row, e] out[row, e].
__global__ void flash_delta_kernel(const float* out, const float* dout, float* delta, int64_t rows, int64_t Dv) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; row < rows; row += warps) {
    float acc = 0.f;
    for (int64_t e = lane; e < Dv; e += 32) acc += dout[row * Dv + e] * out[row * Dv + e];
    acc = warp_reduce(acc, SumOp{});
    if (lane == 0) delta[row] = acc;
  }
}

// P and dS for one logit: P = exp(s scale - lse) where the key is visible, else 0 (a query that sees no
// key, whose lse is -inf, never gets here), dS = P (dP - delta).
__device__ void probability(const FlashArgs& a, int64_t i, int64_t j, float s, float dp, float lse, float delta,
                            float& P, float& dS) {
  P = visible(a, i, j) ? expf(s * a.scale - lse) : 0.f;
  dS = P * (dp - delta);
}

// Block per (head, key block); thread (r, p): key j0 + r against queries i0 + p + 4c of each query tile.
// The block walks the query blocks that see its keys, in order, accumulating dV = P^T dO and dK = dS^T Q
// (times scale) for its rows in registers.
template <int kDim>
__global__ void __launch_bounds__(kFlashThreads) flash_backward_kv_kernel(FlashArgs a, float* dk, float* dv) {
  extern __shared__ float smem[];
  const int ds = odd_stride(a.D), vs = odd_stride(a.Dv);
  float* Ks = smem;
  float* Vs = Ks + kRows * ds;
  float* Qs = Vs + kRows * vs;
  float* dOs = Qs + kRows * ds;
  float* Ts = dOs + kRows * vs;          // P^T, then dS^T, of the tile
  float* Ls = Ts + kRows * kTileStride;  // lse of the tile's queries (-inf past Lq)
  float* Deltas = Ls + kRows;
  const int64_t bh = blockIdx.x / a.k_blocks, j0 = blockIdx.x % a.k_blocks * kRows;
  const int nk = int(min(int64_t(kRows), a.Lk - j0));
  const int r = threadIdx.x / 4, p = threadIdx.x % 4;
  const int64_t j = j0 + r;
  load_rows(Ks, ds, a.k + (bh * a.Lk + j0) * a.D, nk, a.D);
  load_rows(Vs, vs, a.v + (bh * a.Lk + j0) * a.Dv, nk, a.Dv);
  float gk[kDim / 4] = {}, gv[kDim / 4] = {};
  // Query i sees key j0 only from i = j0 - query_offset on (causal).
  const int64_t first = a.causal && j0 - a.query_offset > 0 ? j0 - a.query_offset : 0;
  for (int64_t i0 = first / kRows * kRows; i0 < a.Lq; i0 += kRows) {
    const int nq = int(min(int64_t(kRows), a.Lq - i0));
    __syncthreads();  // the previous query tile has been read
    load_rows(Qs, ds, a.q + (bh * a.Lq + i0) * a.D, nq, a.D);
    load_rows(dOs, vs, a.dout + (bh * a.Lq + i0) * a.Dv, nq, a.Dv);
    if (threadIdx.x < kRows) {
      const bool in = int(threadIdx.x) < nq;
      Ls[threadIdx.x] = in ? a.lse[bh * a.Lq + i0 + threadIdx.x] : -INFINITY;
      Deltas[threadIdx.x] = in ? a.delta[bh * a.Lq + i0 + threadIdx.x] : 0.f;
    }
    __syncthreads();
    float s[kPerThread], dp[kPerThread], dS[kPerThread];
    dot_rows(Ks + r * ds, Qs + p * ds, 4 * ds, a.D, s);
    dot_rows(Vs + r * vs, dOs + p * vs, 4 * vs, a.Dv, dp);
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      const int qi = p + 4 * c;
      float P;
      probability(a, i0 + qi, j, s[c], dp[c], Ls[qi], Deltas[qi], P, dS[c]);
      Ts[r * kTileStride + qi] = P;
    }
    __syncwarp();
    accumulate<kDim>(Ts + r * kTileStride, nq, dOs, vs, p, a.Dv, gv);
    __syncwarp();  // P read by the row's 4 threads before dS replaces it
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) Ts[r * kTileStride + p + 4 * c] = dS[c];
    __syncwarp();
    accumulate<kDim>(Ts + r * kTileStride, nq, Qs, ds, p, a.D, gk);
  }
  if (j >= a.Lk) return;
  store_row<kDim>(dk + (bh * a.Lk + j) * a.D, p, a.D, gk, a.scale);
  store_row<kDim>(dv + (bh * a.Lk + j) * a.Dv, p, a.Dv, gv, 1.f);
}

// Block per (head, query block); thread (r, p): query i0 + r against keys j0 + p + 4c of each key tile.
// The block walks the visible key blocks in order, accumulating dQ = dS K (times scale) in registers.
template <int kDim>
__global__ void __launch_bounds__(kFlashThreads) flash_backward_q_kernel(FlashArgs a, float* dq) {
  extern __shared__ float smem[];
  const int ds = odd_stride(a.D), vs = odd_stride(a.Dv);
  float* Qs = smem;
  float* dOs = Qs + kRows * ds;
  float* Ks = dOs + kRows * vs;
  float* Vs = Ks + kRows * ds;
  float* Ts = Vs + kRows * vs;  // dS of the tile
  const int64_t bh = blockIdx.x / a.q_blocks, i0 = (a.q_blocks - 1 - blockIdx.x % a.q_blocks) * kRows;
  const int nq = int(min(int64_t(kRows), a.Lq - i0));
  const int r = threadIdx.x / 4, p = threadIdx.x % 4;
  const int64_t i = i0 + r;
  load_rows(Qs, ds, a.q + (bh * a.Lq + i0) * a.D, nq, a.D);
  load_rows(dOs, vs, a.dout + (bh * a.Lq + i0) * a.Dv, nq, a.Dv);
  const float L = i < a.Lq ? a.lse[bh * a.Lq + i] : -INFINITY;
  const float delta = i < a.Lq ? a.delta[bh * a.Lq + i] : 0.f;
  float gq[kDim / 4] = {};
  const int64_t kend = key_end(a, i0 + nq - 1);
  for (int64_t j0 = 0; j0 < kend; j0 += kRows) {
    const int nk = int(min(int64_t(kRows), a.Lk - j0));
    __syncthreads();  // the previous key tile has been read
    load_rows(Ks, ds, a.k + (bh * a.Lk + j0) * a.D, nk, a.D);
    load_rows(Vs, vs, a.v + (bh * a.Lk + j0) * a.Dv, nk, a.Dv);
    __syncthreads();
    float s[kPerThread], dp[kPerThread];
    dot_rows(Qs + r * ds, Ks + p * ds, 4 * ds, a.D, s);
    dot_rows(dOs + r * vs, Vs + p * vs, 4 * vs, a.Dv, dp);
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      float P, dS;
      probability(a, i, j0 + p + 4 * c, s[c], dp[c], L, delta, P, dS);
      Ts[r * kTileStride + p + 4 * c] = dS;
    }
    __syncwarp();
    accumulate<kDim>(Ts + r * kTileStride, nk, Ks, ds, p, a.D, gq);
  }
  if (i >= a.Lq) return;
  store_row<kDim>(dq + (bh * a.Lq + i) * a.D, p, a.D, gq, a.scale);
}

// Launches kernel<32>, <64> or <128>: the smallest register tile that holds both head dims.
template <template <int> class Launch, class... Args>
void by_head_dim(int64_t D, int64_t Dv, Args&&... args) {
  const int64_t dim = D > Dv ? D : Dv;
  if (dim <= 32) Launch<32>::run(args...);
  else if (dim <= 64) Launch<64>::run(args...);
  else Launch<128>::run(args...);
}

template <int kDim>
struct Forward {
  static void run(const FlashArgs& a, unsigned blocks, float* out, float* lse) {
    const int64_t floats = int64_t(kRows) * (2 * odd_stride(a.D) + odd_stride(a.Dv) + kTileStride);
    allow_shared(flash_forward_kernel<kDim>, floats, "flash_forward_kernel");
    flash_forward_kernel<kDim><<<blocks, kFlashThreads, size_t(floats) * sizeof(float)>>>(a, out, lse);
    check_launch("flash_forward_kernel");
  }
};

template <int kDim>
struct BackwardKV {
  static void run(const FlashArgs& a, unsigned blocks, float* dk, float* dv) {
    const int64_t floats = int64_t(kRows) * (2 * odd_stride(a.D) + 2 * odd_stride(a.Dv) + kTileStride + 2);
    allow_shared(flash_backward_kv_kernel<kDim>, floats, "flash_backward_kv_kernel");
    flash_backward_kv_kernel<kDim><<<blocks, kFlashThreads, size_t(floats) * sizeof(float)>>>(a, dk, dv);
    check_launch("flash_backward_kv_kernel");
  }
};

template <int kDim>
struct BackwardQ {
  static void run(const FlashArgs& a, unsigned blocks, float* dq) {
    const int64_t floats = int64_t(kRows) * (2 * odd_stride(a.D) + 2 * odd_stride(a.Dv) + kTileStride);
    allow_shared(flash_backward_q_kernel<kDim>, floats, "flash_backward_q_kernel");
    flash_backward_q_kernel<kDim><<<blocks, kFlashThreads, size_t(floats) * sizeof(float)>>>(a, dq);
    check_launch("flash_backward_q_kernel");
  }
};

constexpr int64_t kMaxGridX = (int64_t(1) << 31) - 1;

FlashArgs make_args(const char* op, const float* q, const float* k, const float* v, int64_t B, int64_t H, int64_t Lq,
                    int64_t Lk, int64_t D, int64_t Dv, float scale, bool causal, int64_t query_offset) {
  ENG_CHECK(B >= 0 && H >= 0 && Lq >= 0 && Lk >= 0 && D >= 0 && Dv >= 0, op, ": negative size B=", B, " H=", H,
            " Lq=", Lq, " Lk=", Lk, " D=", D, " Dv=", Dv);
  ENG_CHECK(D <= kMaxHead && Dv <= kMaxHead, op, ": head dims D = ", D, " and Dv = ", Dv, " must be at most ",
            kMaxHead, " (the tiles are staged in shared memory)");
  FlashArgs a{q, k, v, nullptr, nullptr, nullptr, nullptr, Lq, Lk, D, Dv, scale, causal, query_offset,
              ceil_div(Lq, kRows), ceil_div(Lk, kRows)};
  ENG_CHECK(B * H * (a.q_blocks > a.k_blocks ? a.q_blocks : a.k_blocks) <= kMaxGridX, op, ": ", B * H,
            " heads of ", Lq, " queries and ", Lk, " keys are too many blocks for one launch");
  return a;
}

}  // namespace

void flash_attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t B,
                             int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, float scale, bool causal,
                             int64_t query_offset) {
  const FlashArgs a =
      make_args("cuda::flash_attention_forward", q, k, v, B, H, Lq, Lk, D, Dv, scale, causal, query_offset);
  if (B * H * Lq == 0) return;
  by_head_dim<Forward>(D, Dv, a, unsigned(B * H * a.q_blocks), out, lse);
}

void flash_attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, int64_t B, int64_t H, int64_t Lq,
                              int64_t Lk, int64_t D, int64_t Dv, float scale, bool causal, int64_t query_offset) {
  FlashArgs a =
      make_args("cuda::flash_attention_backward", q, k, v, B, H, Lq, Lk, D, Dv, scale, causal, query_offset);
  const int64_t rows = B * H * Lq;
  Scratch delta(rows > 0 ? rows : 1);
  a.out = out, a.dout = dout, a.lse = lse, a.delta = delta.get();
  if (rows > 0) {
    flash_delta_kernel<<<grid_for(rows * 32, kThreads), kThreads>>>(out, dout, delta.get(), rows, Dv);
    check_launch("flash_delta_kernel");
    by_head_dim<BackwardQ>(D, Dv, a, unsigned(B * H * a.q_blocks), dq);
  }
  // With Lq = 0, dK and dV are written as zeros.
  if (B * H * Lk > 0) by_head_dim<BackwardKV>(D, Dv, a, unsigned(B * H * a.k_blocks), dk, dv);
}

}  // namespace eng::cuda
