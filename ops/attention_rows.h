// What the attention kernels share: [B, H, L, E] operands read in place through their strides (rows,
// the last axis, contiguous) and small strided products through the GEMM kernel.
#pragma once
#include <cstdint>

#include "engine/tensor.h"
#include "ops/gemm.h"

namespace eng {

template <class T>
struct Rows {
  const T* p = nullptr;
  int64_t sb = 0, sh = 0, sl = 0;
  const T* at(int64_t b, int64_t h, int64_t l) const { return p + b * sb + h * sh + l * sl; }
};

template <class T>
Rows<T> rows_of(const Tensor& t) {
  return {t.data<T>(), t.strides()[0], t.strides()[1], t.strides()[2]};
}

// The operand outside the graph, with contiguous rows (the kernels read other strides in place).
inline Tensor rows_contiguous(const Tensor& t) {
  Tensor d = t.detach();
  return d.strides()[3] == 1 ? d : d.contiguous();
}

// C (rows c_rs) (+)= A B, A [M, K] and B [K, N] given by their row and column strides.
template <class T>
void tile_product(int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs, const T* B, int64_t b_rs,
                  int64_t b_cs, T* C, int64_t c_rs, bool accumulate) {
  GemmArgs<T> g;
  g.M = M, g.N = N, g.K = K;
  g.A = A, g.a_rs = a_rs, g.a_cs = a_cs;
  g.B = B, g.b_rs = b_rs, g.b_cs = b_cs;
  g.C = C, g.c_rs = c_rs, g.accumulate = accumulate;
  gemm(g);
}

}  // namespace eng
