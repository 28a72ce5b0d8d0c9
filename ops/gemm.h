// GEMM kernels: C (+)= A · B on strided operands, so transposed and batched inputs need no copies.
// gemm_reference is the plain triple loop every faster kernel is tested against; gemm picks the
// fastest kernel built for this CPU (today: a cache-blocked loop the compiler vectorises).
#pragma once
#include <cstdint>

namespace eng {

template <class T>
struct GemmArgs {
  int64_t M = 0, N = 0, K = 0;
  const T* A = nullptr;
  int64_t a_rs = 0, a_cs = 0;  // A[m, k] = A[m * a_rs + k * a_cs]
  const T* B = nullptr;
  int64_t b_rs = 0, b_cs = 0;  // B[k, n] = B[k * b_rs + n * b_cs]
  T* C = nullptr;
  int64_t c_rs = 0;            // C[m, n] = C[m * c_rs + n], rows contiguous
  bool accumulate = false;     // C += A·B instead of C = A·B
};

template <class T>
void gemm_reference(const GemmArgs<T>& g);

// Runs on the calling thread; callers parallelise over batches or row blocks.
template <class T>
void gemm(const GemmArgs<T>& g);

}  // namespace eng
