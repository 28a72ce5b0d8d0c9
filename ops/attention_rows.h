// What the attention kernels share: [B, H, L, E] operands read in place through their strides (rows,
// the last axis, contiguous) and small strided products through the GEMM kernel.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/tensor.h"
#include "engine/vec_kernels.h"
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

// The largest of row[0, n), NaN if any is NaN (-inf for n = 0).
template <class T>
T row_maximum(const T* row, int64_t n) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n && !std::isnan(mx); ++j)
    if (row[j] > mx || std::isnan(row[j])) mx = row[j];
  return mx;
}
inline float row_maximum(const float* row, int64_t n) { return vec_kernels().max(row, n); }

// row = exp(row - m) in place (-inf gives 0), returning the row's new sum; f32 through the SIMD kernel.
template <class T>
T exp_minus(T* row, T m, int64_t n) {
  T sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    row[j] = row[j] == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(row[j] - m);
    sum += row[j];
  }
  return sum;
}
inline float exp_minus(float* row, float m, int64_t n) { return vec_kernels().exp_sub_sum(row, m, row, n); }

// The operand outside the graph, with contiguous rows (the kernels read other strides in place).
inline Tensor rows_contiguous(const Tensor& t) {
  Tensor d = t.detach();
  return d.strides()[3] == 1 ? d : d.contiguous();
}

// C (rows c_rs) (+)= A B, A [M, K] and B [K, N] given by their row and column strides; a bf16 `precision` for f32
// only (ops/mixed_precision.h).
template <class T>
void tile_product(int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs, const T* B, int64_t b_rs,
                  int64_t b_cs, T* C, int64_t c_rs, bool accumulate, GemmPrecision precision = GemmPrecision::F32) {
  GemmArgs<T> g;
  g.M = M, g.N = N, g.K = K;
  g.A = A, g.a_rs = a_rs, g.a_cs = a_cs;
  g.B = B, g.b_rs = b_rs, g.b_cs = b_cs;
  g.C = C, g.c_rs = c_rs, g.accumulate = accumulate, g.precision = precision;
  gemm(g);
}

// The end of an online softmax over one block of nq query rows: o [nq, Dv] holds Σ exp(s - m_i) v, l_i the sum
// of the weights and m_i the running maximum. Divides each row by l_i and writes lse_i = m_i + log l_i (rows
// nq from lse); a row that saw no key (l_i = 0) becomes zeros with lse -inf, never NaN.
template <class T>
void finish_softmax_rows(int64_t nq, int64_t Dv, const std::vector<T>& l, const std::vector<T>& m, T* o, T* lse) {
  for (int64_t i = 0; i < nq; ++i) {
    const T li = l[size_t(i)];
    T* orow = o + i * Dv;
    if (li == T(0)) {
      std::fill(orow, orow + Dv, T(0));
      lse[i] = -std::numeric_limits<T>::infinity();
    } else {
      for (int64_t c = 0; c < Dv; ++c) orow[c] /= li;
      lse[i] = m[size_t(i)] + std::log(li);
    }
  }
}

}  // namespace eng
