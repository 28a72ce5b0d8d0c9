#include "ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/autograd.h"
#include "engine/threadpool.h"
#include "engine/vec_kernels.h"
#include "ops/binary.h"
#include "ops/cuda/dispatch.h"
#include "ops/kernel_util.h"
#include "ops/reduce_kernel.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_OP("sum");
ENG_REGISTER_OP("mean");
ENG_REGISTER_OP("max");
ENG_REGISTER_OP("min");

std::vector<int64_t> reduce_axes(const Tensor& a, const Shape& axes, const char* op) {
  std::vector<int64_t> r;
  if (axes.empty())
    for (int64_t d = 0; d < a.dim(); ++d) r.push_back(d);
  for (int64_t ax : axes) r.push_back(wrap_axis(ax, a.dim(), op));
  std::sort(r.begin(), r.end());
  ENG_CHECK(std::adjacent_find(r.begin(), r.end()) == r.end(), op, ": repeated axis in ", axes, " for shape ",
            a.shape());
  return r;
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdim) {
  Shape s;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    bool red = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!red)
      s.push_back(shape[size_t(d)]);
    else if (keepdim)
      s.push_back(1);
  }
  return s;
}

// Each column: float sums of 64 rows, in order, added in double. A thread takes one wide block of columns (at
// least 128), so that each row is read in long runs: blocks of 128 read 512 bytes a row, every row stride apart.
void sum_rows_f32(const float* x, int64_t rows, int64_t cols, float* out) {
  constexpr int64_t kRows = 64;
  const int64_t block = std::max<int64_t>(128, (cols + num_threads() - 1) / num_threads() + 15) / 16 * 16;
  const auto add = vec_kernels().add;
  parallel_for(0, (cols + block - 1) / block, 1, [&](int64_t blo, int64_t bhi) {
    std::vector<float> part(static_cast<size_t>(block));
    std::vector<double> total(static_cast<size_t>(block));
    for (int64_t blk = blo; blk < bhi; ++blk) {
      const int64_t c0 = blk * block, width = std::min(block, cols - c0);
      std::fill(total.begin(), total.begin() + width, 0.0);
      for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
        std::fill(part.begin(), part.begin() + width, 0.f);
        for (int64_t r = r0; r < std::min(rows, r0 + kRows); ++r)
          add(part.data(), x + r * cols + c0, part.data(), width);
        for (int64_t j = 0; j < width; ++j) total[size_t(j)] += part[size_t(j)];
      }
      for (int64_t j = 0; j < width; ++j) out[c0 + j] = float(total[size_t(j)]);
    }
  });
}

namespace {

// Whether `ax` (sorted) is the leading axes 0..k-1 of a tensor with more than k dims.
bool leading_axes(const std::vector<int64_t>& ax, int64_t dim) {
  for (size_t i = 0; i < ax.size(); ++i)
    if (ax[i] != int64_t(i)) return false;
  return !ax.empty() && int64_t(ax.size()) < dim;
}

}  // namespace

Tensor sum(const Tensor& a, const Shape& axes, bool keepdim) {
  if (on_cuda(a)) return cuda_op::sum(a, axes, keepdim);
  auto ax = reduce_axes(a, axes, "sum");
  Tensor out = empty(reduced_shape(a.shape(), ax, keepdim), a.dtype());
  if (a.dtype() == DType::F32 && a.is_contiguous() && leading_axes(ax, a.dim())) {
    const int64_t cols = shape_numel(Shape(a.shape().begin() + int64_t(ax.size()), a.shape().end()));
    sum_rows_f32(a.data<float>(), cols > 0 ? a.numel() / cols : 0, cols, out.data<float>());
  } else {
    ENG_DISPATCH(a.dtype(), T, reduce_kernel<T, double>(
                                   a, ax, out.data<T>(), 0.0, [](double acc, T x) { return acc + double(x); },
                                   [](double acc, int64_t) { return acc; }));
  }
  return record(out, "sum", {a}, [in = a.shape(), kept = reduced_shape(a.shape(), ax, true)](const Tensor& g) {
    return std::vector<Tensor>{expand(reshape(g, kept), in)};
  });
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (on_cuda(a)) return cuda_op::sum_to(a, shape);
  if (a.shape() == shape) return a;
  ENG_CHECK(a.dim() >= int64_t(shape.size()), "sum_to: cannot reduce shape ", a.shape(), " to ", shape);
  Shape axes;
  size_t lead = size_t(a.dim()) - shape.size();
  for (size_t d = 0; d < size_t(a.dim()); ++d) {
    if (d < lead) {
      axes.push_back(int64_t(d));
    } else if (shape[d - lead] == 1 && a.shape()[d] != 1) {
      axes.push_back(int64_t(d));
    } else {
      ENG_CHECK(shape[d - lead] == a.shape()[d], "sum_to: cannot reduce shape ", a.shape(), " to ", shape);
    }
  }
  if (axes.empty()) return reshape(a, shape);
  return reshape(sum(a, axes, true), shape);
}

Tensor mean(const Tensor& a, const Shape& axes, bool keepdim) {
  auto ax = reduce_axes(a, axes, "mean");
  int64_t count = 1;
  for (int64_t d : ax) count *= a.shape()[size_t(d)];
  Tensor out = empty(reduced_shape(a.shape(), ax, keepdim), a.dtype());
  ENG_DISPATCH(a.dtype(), T, reduce_kernel<T, double>(
                                 a, ax, out.data<T>(), 0.0, [](double acc, T x) { return acc + double(x); },
                                 [](double acc, int64_t n) { return acc / double(n); }));
  return record(out, "mean", {a},
                [in = a.shape(), kept = reduced_shape(a.shape(), ax, true), count](const Tensor& g) {
                  return std::vector<Tensor>{expand(reshape(mul_scalar(g, 1.0 / double(count)), kept), in)};
                });
}

namespace {

void check_nonempty(const Tensor& a, const std::vector<int64_t>& axes, const char* op) {
  for (int64_t d : axes)
    ENG_CHECK(a.shape()[size_t(d)] > 0, op, ": cannot reduce over axis ", d, " of size 0 in shape ", a.shape());
}

// Whether x replaces the current best: a strictly better value, or a NaN (which then stays).
template <bool IsMax, class T>
bool beats(T x, T best) {
  if (std::isnan(best)) return false;
  return std::isnan(x) || (IsMax ? x > best : x < best);
}

template <bool IsMax>
Tensor extremum(const Tensor& a, const Shape& axes, bool keepdim, const char* op) {
  if (!is_floating(a.dtype())) fail_not_floating(op);
  auto ax = reduce_axes(a, axes, op);
  check_nonempty(a, ax, op);
  Shape kept = reduced_shape(a.shape(), ax, true);
  Tensor out = empty(reduced_shape(a.shape(), ax, keepdim), a.dtype());
  ENG_DISPATCH(a.dtype(), T, {
    const T init = IsMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    reduce_kernel<T, T>(
        a, ax, out.data<T>(), init, [](T best, T x) { return beats<IsMax>(x, best) ? x : best; },
        [](T best, int64_t) { return best; });
  });
  return record(out, op, {a}, [a = a.detach(), m = out.detach(), kept, ax, op](const Tensor& g) {
    // Every element equal to the result (NaN matching NaN) gets an equal share of g.
    Tensor hit = map_binary(a, reshape(m, kept), op, [](auto x, auto y) {
      return decltype(x)(x == y || (std::isnan(x) && std::isnan(y)) ? 1 : 0);
    });
    Tensor share = div(reshape(g, kept), sum(hit, ax, true));
    return std::vector<Tensor>{mul(hit, share)};
  });
}

}  // namespace

Tensor max(const Tensor& a, const Shape& axes, bool keepdim) { return extremum<true>(a, axes, keepdim, "max"); }
Tensor min(const Tensor& a, const Shape& axes, bool keepdim) { return extremum<false>(a, axes, keepdim, "min"); }

Tensor argmax(const Tensor& a, int64_t axis, bool keepdim) {
  require_cpu(a, "argmax");
  const int64_t d = wrap_axis(axis, a.dim(), "argmax");
  check_nonempty(a, {d}, "argmax");
  const int64_t n = a.shape()[size_t(d)], step = a.strides()[size_t(d)];
  Shape outer = a.shape(), outer_st = a.strides();
  outer.erase(outer.begin() + d);
  outer_st.erase(outer_st.begin() + d);
  std::vector<int64_t> base;
  base.reserve(size_t(shape_numel(outer)));
  for_each_offset<1>(outer, {outer_st.data()}, {a.offset()}, [&](auto o) { base.push_back(o[0]); });
  Tensor out = empty(reduced_shape(a.shape(), {d}, keepdim), DType::I64);
  int64_t* o = out.data<int64_t>();
  ENG_DISPATCH_ALL(a.dtype(), T, {
    const T* x = static_cast<const T*>(a.storage()->data);
    parallel_for(0, int64_t(base.size()), std::max<int64_t>(1, 16384 / n), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T* p = x + base[size_t(i)];
        int64_t best = 0;
        for (int64_t k = 1; k < n; ++k)
          if (beats<true>(p[k * step], p[best * step])) best = k;
        o[i] = best;
      }
    });
  });
  return out;
}

}  // namespace eng
