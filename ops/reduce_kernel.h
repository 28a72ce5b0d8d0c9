// The generic reduction loop: for each output element, fold the reduced elements of the input.
#pragma once
#include <algorithm>
#include <vector>

#include "engine/error.h"
#include "engine/strided.h"
#include "engine/tensor.h"
#include "engine/threadpool.h"
#include "ops/kernel_util.h"

namespace eng {

// Normalised, sorted, unique axes (all axes when `axes` is empty).
std::vector<int64_t> reduce_axes(const Tensor& a, const Shape& axes, const char* op);
// The shape of the result of reducing `axes` (keepdim keeps them as 1).
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdim);

// out[o] = finish(fold over reduced elements x of step(acc, x) from init, count). Acc is the
// accumulator type (double for sums of f32, for accuracy in the reference path).
template <class T, class Acc, class Step, class Finish>
void reduce_kernel(const Tensor& a, const std::vector<int64_t>& axes, T* out, Acc init, Step step, Finish finish) {
  require_cpu(a, "reduction");
  Shape outer_shape, outer_st, inner_shape, inner_st;
  for (int64_t d = 0; d < a.dim(); ++d) {
    bool red = std::find(axes.begin(), axes.end(), d) != axes.end();
    (red ? inner_shape : outer_shape).push_back(a.shape()[size_t(d)]);
    (red ? inner_st : outer_st).push_back(a.strides()[size_t(d)]);
  }
  std::vector<int64_t> base;
  base.reserve(size_t(shape_numel(outer_shape)));
  for_each_offset<1>(outer_shape, {outer_st.data()}, {a.offset()}, [&](auto o) { base.push_back(o[0]); });
  const T* x = static_cast<const T*>(a.storage()->data);
  const int64_t count = shape_numel(inner_shape);
  parallel_for(0, int64_t(base.size()), std::max<int64_t>(1, 16384 / std::max<int64_t>(count, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t i = lo; i < hi; ++i) {
                   Acc acc = init;
                   if (inner_shape.size() == 1) {
                     const T* p = x + base[size_t(i)];
                     for (int64_t k = 0, s = inner_st[0]; k < count; ++k) acc = step(acc, p[k * s]);
                   } else {
                     for_each_offset<1>(inner_shape, {inner_st.data()}, {base[size_t(i)]},
                                        [&](auto o) { acc = step(acc, x[o[0]]); });
                   }
                   out[i] = T(finish(acc, count));
                 }
               });
}

}  // namespace eng
