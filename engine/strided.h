// Walks every element of a shape in row-major order over N operands that each have their own
// strides (a broadcast operand has stride 0). The callback gets the element offset of each operand.
// This is the one loop nest every generic (non-contiguous) kernel is built on.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "engine/dtype.h"

namespace eng {

template <size_t N, class F>
void for_each_offset(const Shape& shape, const std::array<const int64_t*, N>& strides,
                     std::array<int64_t, N> off, F&& f) {
  const int64_t nd = int64_t(shape.size());
  for (int64_t s : shape)
    if (s == 0) return;
  if (nd == 0) {
    f(off);
    return;
  }
  std::vector<int64_t> idx(size_t(nd), 0);
  const int64_t inner = shape[size_t(nd - 1)];
  std::array<int64_t, N> step;
  for (size_t k = 0; k < N; ++k) step[k] = strides[k][nd - 1];
  for (;;) {
    std::array<int64_t, N> o = off;
    for (int64_t i = 0; i < inner; ++i) {
      f(o);
      for (size_t k = 0; k < N; ++k) o[k] += step[k];
    }
    int64_t d = nd - 2;
    for (; d >= 0; --d) {
      for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
      if (++idx[size_t(d)] < shape[size_t(d)]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * shape[size_t(d)];
      idx[size_t(d)] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace eng
