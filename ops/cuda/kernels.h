// Raw f32 CUDA kernels behind a plain C++ API (no CUDA types, so any file of a CUDA=1 build may include
// this). Every pointer is a device pointer to contiguous memory (Tensor::device_data); sizes are element
// counts. Each call queues its kernels on the default stream and returns at once; a failed launch
// throws eng::Error naming the kernel (engine/cuda.h check_launch), while a fault during execution
// surfaces at the next synchronising call (cuda::synchronize, a copy to the host). Empty sizes queue
// nothing, except that outputs reduced over an empty axis (dw, db, sum_rows' out) are written as zeros.
// One family per file: ops/cuda/<family>.cu. See docs/cuda.md.
#pragma once
#include <cstdint>

#include "engine/cuda.h"

namespace eng::cuda {

// elementwise.cu -----------------------------------------------------------------------------------------
enum class UnaryKind {
  Exp,
  Log,
  Tanh,
  Sigmoid,
  Relu,
  Gelu,        // exact: 0.5 x (1 + erf(x / sqrt 2))
  GeluTanh,    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  Silu,        // x sigmoid(x)
  Elu,         // alpha 1: x > 0 ? x : exp(x) - 1
  EluPlusOne,  // x > 0 ? x + 1 : exp(x) (linear attention's feature map)
};
// y = f(x) over n elements (y may be x).
void unary(UnaryKind kind, const float* x, float* y, int64_t n);
// dx = dy * f'(x) over n elements (dx may alias dy).
void unary_backward(UnaryKind kind, const float* x, const float* dy, float* dx, int64_t n);

enum class BinaryKind { Add, Sub, Mul, Div };
// out[i] = a[i] op b[i % b_period] over n elements: b_period == n for operands of one shape, the row
// length for a bias row broadcast over rows. b_period > 0; out may alias a.
void binary(BinaryKind kind, const float* a, const float* b, float* out, int64_t n, int64_t b_period);

// softmax.cu ---------------------------------------------------------------------------------------------
// Row-wise softmax (or log-softmax) of x [rows, cols], stable (the row maximum is subtracted). A row that
// is entirely -inf gives zeros (softmax) or -inf (log-softmax), never NaN, as ops/softmax.h.
// y may be x.
void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, bool log);
// From the forward output y: softmax dx = y (dy - sum(dy y)); log-softmax dx = dy - exp(y) sum(dy). dx may
// share dy's memory.
void softmax_rows_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, bool log);

// layer_norm.cu ------------------------------------------------------------------------------------------
// Per row of x [rows, cols]: y = (x - mean) * rstd * w + b with rstd = 1 / sqrt(var + eps) and the biased
// variance (layer norm), or with rms: y = x * rstd * w + b, rstd = 1 / sqrt(mean(x^2) + eps). w and b may be
// null (scale 1, shift 0); mean and rstd [rows] are written when not null (mean = 0 with rms). y may be x.
void layer_norm_rows(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd, int64_t rows,
                     int64_t cols, float eps, bool rms);
// Gradients from the saved statistics: dx [rows, cols] always (it may share dy's memory); dw and db [cols]
// when not null, overwritten (not accumulated) and deterministic (fixed-order partial sums, no atomics).
// mean is not read with rms (it may be null then).
void layer_norm_rows_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                              float* dx, float* dw, float* db, int64_t rows, int64_t cols, bool rms);

// gemm.cu ------------------------------------------------------------------------------------------------
// Reference: one thread per output, a plain loop over k (the yardstick). Tiled: fp32 FMA from shared-memory
// tiles, 128x128x8 per block, 8x8 outputs per thread. Tf32: tensor cores (WMMA m16n16k8, tf32 inputs with a
// 10-bit mantissa, fp32 accumulation), sm_80 and later only: about 1e-3 relative error per product, so
// results differ from fp32 by ~1e-3 * sqrt(K) * |a| |b|. Auto: Tf32 on sm_80+, else Tiled.
enum class GemmAlgo { Reference, Tiled, Tf32, Auto };
// Row-major, per batch i: C_i = alpha op(A_i) op(B_i) + beta C_i with op(A) [M, K], op(B) [K, N], C [M, N].
// A_i = A + i stride_a is [M, K] with row stride lda, or [K, M] when trans_a (op(A) = its transpose); B_i
// likewise [K, N] or, when trans_b, [N, K]; C_i = C + i stride_c has row stride ldc. A stride of 0 reuses one
// matrix for every batch. beta == 0 never reads C (NaN there is overwritten). C must not overlap A or B.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
          int64_t stride_c, int64_t batch, GemmAlgo algo = GemmAlgo::Auto);

// loss.cu ------------------------------------------------------------------------------------------------
// Per row of logits [rows, vocab]: lse = log(sum(exp(logits))) (stable) and loss = lse - logits[target],
// 0 where target == ignore_index. The caller checks the targets on the host; a target outside [0, vocab)
// that is not ignore_index gives a NaN loss rather than an out-of-bounds read.
void cross_entropy_rows(const float* logits, const int64_t* targets, float* loss, float* lse, int64_t rows,
                        int64_t vocab, int64_t ignore_index);
// dlogits = dloss[row] (softmax(logits) - onehot(target)) from the saved lse; zero rows for ignored targets
// (and for targets out of range).
void cross_entropy_rows_backward(const float* logits, const int64_t* targets, const float* lse, const float* dloss,
                                 float* dlogits, int64_t rows, int64_t vocab, int64_t ignore_index);

// adam_update, the optimizer's kernel, is in engine/cuda.h (engine/cuda_adam.cu): the optimizers live in engine/.

// embedding.cu -------------------------------------------------------------------------------------------
// out [n_ids, dim] = weight [vocab, dim] rows picked by ids. The caller checks the ids on the host; a row
// whose id is outside [0, vocab) is written as zeros.
void embedding_gather(const float* weight, const int64_t* ids, float* out, int64_t n_ids, int64_t vocab, int64_t dim);
// dweight[ids[i]] += dout[i] (dweight is accumulated into: zero it first for a fresh gradient). Repeated
// ids meet in float atomicAdd, so the sums are not bitwise deterministic. Out-of-range ids are skipped.
void embedding_scatter_add(const float* dout, const int64_t* ids, float* dweight, int64_t n_ids, int64_t vocab,
                           int64_t dim);

// reduce.cu ----------------------------------------------------------------------------------------------
// out[c] = sum over r of x[r, c] (the bias gradient), deterministic: fixed row chunks summed in order.
void sum_rows(const float* x, float* out, int64_t rows, int64_t cols);

// attention.cu -------------------------------------------------------------------------------------------
// Fused softmax attention (FlashAttention, Dao et al. 2022), the GPU twin of ops/attention_flash.h with a
// causal mask only: q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] -> out [B, H, Lq, Dv] =
// softmax(q kᵀ scale) v and lse [B, H, Lq], each row's logsumexp of the scaled logits. Causal: query i
// (absolute position i + query_offset) sees keys j <= i + query_offset; without causal every key. A query
// that sees no key (causal with i + query_offset < 0, or Lk = 0) gets zeros and lse = -inf. D and Dv are
// at most 128 (eng::Error otherwise). Never materialises Lq x Lk: tiles of 64 queries x 64 keys in shared
// memory, an online softmax, causal key tiles after the diagonal skipped.
void flash_attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t B,
                             int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, float scale, bool causal,
                             int64_t query_offset);
// Gradients from the forward's out and lse: dq, dk, dv overwritten (all three written, zeros where nothing
// flows), deterministic (no atomics: one kernel per key block for dk, dv, one per query block for dq, each
// summing its tiles in a fixed order). Scratch: B H Lq floats (rowsum(dout out)).
void flash_attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, int64_t B, int64_t H, int64_t Lq,
                              int64_t Lk, int64_t D, int64_t Dv, float scale, bool causal, int64_t query_offset);

// linear_attention.cu ------------------------------------------------------------------------------------
// Causal linear attention (Katharopoulos et al. 2020), as ops/linear_attention.h's causal_linear_attention
// without key padding: q, k [B, H, N, M], v [B, H, N, Dv] -> out [B, H, N, Dv],
//   out_i = φ(q_i)ᵀ S_i / (φ(q_i)ᵀ z_i + eps),  S_i = Σ_{j<=i} φ(k_j) v_jᵀ,  z_i = Σ_{j<=i} φ(k_j),
// φ(x) = elu(x) + 1 applied inside the kernels when elu_feature, else the identity (q, k already features).
// eps >= 0 is added after the dot product. M is at most 128. Walks the positions in chunks of 32 with the
// running state in shared memory: O(N M Dv) time, never the N states.
void causal_linear_attention_forward(const float* q, const float* k, const float* v, float* out, int64_t B, int64_t H,
                                     int64_t N, int64_t M, int64_t Dv, float eps, bool elu_feature);
// Gradients (dq, dk, dv overwritten) from the forward's out and dout: a prefix pass for dq and suffix passes
// for dk and dv (the paper's Algorithm 1), deterministic. M and Dv are at most 128. Scratch: 2 B H N floats
// (the denominators and ∂L/∂den).
void causal_linear_attention_backward(const float* q, const float* k, const float* v, const float* out,
                                      const float* dout, float* dq, float* dk, float* dv, int64_t B, int64_t H,
                                      int64_t N, int64_t M, int64_t Dv, float eps, bool elu_feature);
// One recurrent step (Eq. 16–20) for every (b, h): q, k [B, H, M], v [B, H, Dv] (one position), state
// s [B, H, M, Dv] and z [B, H, M] (zero at the start) updated in place, s += φ(k) vᵀ, z += φ(k), unless k is
// null (then v is not read and the state only read); then out [B, H, Dv] = φ(q)ᵀ s / (φ(q)ᵀ z + eps).
void linear_attention_step(const float* q, const float* k, const float* v, float* s, float* z, float* out, int64_t B,
                           int64_t H, int64_t M, int64_t Dv, float eps, bool elu_feature);

}  // namespace eng::cuda
