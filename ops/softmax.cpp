#include "ops/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "engine/vec_kernels.h"
#include "ops/cuda/dispatch.h"

namespace eng {

ENG_REGISTER_OP("softmax");
ENG_REGISTER_OP("log_softmax");

namespace {

// A contiguous tensor seen as rows along one axis: row r = (o, i), with o indexing the dims before the
// axis and i those after it, starts at o * n * inner + i and steps by `inner` (1 for the last axis).
struct AxisRows {
  int64_t count = 0, n = 0, inner = 1;
  int64_t start(int64_t r) const { return (r / inner) * n * inner + r % inner; }
  int64_t grain() const { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)); }
};

AxisRows rows_along(const Shape& shape, int64_t axis) {
  AxisRows R;
  R.n = shape[size_t(axis)];
  int64_t outer = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (int64_t(d) < axis) outer *= shape[d];
    if (int64_t(d) > axis) R.inner *= shape[d];
  }
  R.count = outer * R.inner;
  return R;
}

// y = softmax(x) or log_softmax(x) row by row. The maximum is taken NaN-first so a NaN anywhere in a
// row makes the whole row NaN; a row that is entirely -inf gives zeros (softmax) or -inf (log).
template <bool Log, class T>
void softmax_forward(const T* x, T* y, const AxisRows& R) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  parallel_for(0, R.count, R.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* px = x + R.start(r);
      T* py = y + R.start(r);
      const int64_t s = R.inner;
      T m = neg_inf;
      for (int64_t k = 0; k < R.n && !std::isnan(m); ++k)
        if (std::isnan(px[k * s]) || px[k * s] > m) m = px[k * s];
      if (m == neg_inf) {
        for (int64_t k = 0; k < R.n; ++k) py[k * s] = Log ? neg_inf : T(0);
        continue;
      }
      double total = 0;
      for (int64_t k = 0; k < R.n; ++k) {
        T e = std::exp(px[k * s] - m);
        if (!Log) py[k * s] = e;
        total += double(e);
      }
      if (Log) {
        // (x - m) first: adding log(total) to a large m would round it away in f32
        const T log_total = T(std::log(total));
        for (int64_t k = 0; k < R.n; ++k) py[k * s] = (px[k * s] - m) - log_total;
      } else {
        const T inv = T(1.0 / total);
        for (int64_t k = 0; k < R.n; ++k) py[k * s] *= inv;
      }
    }
  });
}

// From the saved output y: softmax dx = y * (g - sum(g * y)); log_softmax dx = g - exp(y) * sum(g).
template <bool Log, class T>
void softmax_backward(const T* y, const T* g, T* dx, const AxisRows& R) {
  parallel_for(0, R.count, R.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t b = R.start(r), s = R.inner;
      double acc = 0;
      for (int64_t k = 0; k < R.n; ++k) acc += Log ? double(g[b + k * s]) : double(g[b + k * s]) * double(y[b + k * s]);
      const T t = T(acc);
      for (int64_t k = 0; k < R.n; ++k) {
        const int64_t i = b + k * s;
        dx[i] = Log ? g[i] - std::exp(y[i]) * t : y[i] * (g[i] - t);
      }
    }
  });
}

// f32 along the last axis: the SIMD row kernels (engine/vec_kernels.h).
template <bool Log>
void softmax_forward_f32(const float* x, float* y, const AxisRows& R) {
  const auto row = Log ? vec_kernels().log_softmax_row : vec_kernels().softmax_row;
  parallel_for(0, R.count, R.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) row(x + r * R.n, y + r * R.n, R.n);
  });
}
template <bool Log>
void softmax_backward_f32(const float* y, const float* g, float* dx, const AxisRows& R) {
  const auto row = Log ? vec_kernels().log_softmax_backward_row : vec_kernels().softmax_backward_row;
  parallel_for(0, R.count, R.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) row(y + r * R.n, g + r * R.n, dx + r * R.n, R.n);
  });
}

template <bool Log>
Tensor softmax_impl(const Tensor& a, int64_t axis, const char* op) {
  const int64_t d = wrap_axis(axis, a.dim(), op);
  if (!is_floating(a.dtype())) fail_not_floating(op);
  if (a.device() == Device::CUDA) return cuda_op::softmax(a, axis, Log);
  const AxisRows R = rows_along(a.shape(), d);
  Tensor x = a.detach().contiguous();
  Tensor out = empty(a.shape(), a.dtype());
  const bool vec = a.dtype() == DType::F32 && R.inner == 1;
  if (vec)
    softmax_forward_f32<Log>(x.data<float>(), out.data<float>(), R);
  else
    ENG_DISPATCH(a.dtype(), T, softmax_forward<Log, T>(x.data<T>(), out.data<T>(), R));
  return record(out, op, {a}, [y = out.detach(), R, vec](const Tensor& grad) {
    Tensor g = grad.contiguous();
    Tensor dx = empty(y.shape(), y.dtype());
    if (vec)
      softmax_backward_f32<Log>(y.data<float>(), g.data<float>(), dx.data<float>(), R);
    else
      ENG_DISPATCH(y.dtype(), T, softmax_backward<Log, T>(y.data<T>(), g.data<T>(), dx.data<T>(), R));
    return std::vector<Tensor>{dx};
  });
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t axis) { return softmax_impl<false>(a, axis, "softmax"); }
Tensor log_softmax(const Tensor& a, int64_t axis) { return softmax_impl<true>(a, axis, "log_softmax"); }

}  // namespace eng
