// Shared loops for elementwise ops: broadcasting, a contiguous fast path (threaded) and a generic
// strided path. Every elementwise op in ops/ is one call to map_unary or map_binary with a lambda.
#pragma once
#include "engine/dtype.h"
#include "engine/error.h"
#include "engine/strided.h"
#include "engine/tensor.h"
#include "engine/threadpool.h"

namespace eng {

// NumPy broadcasting of two shapes; `op` names the caller in the error.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Strides that read `t` as if expanded to `shape` (stride 0 on broadcast dims).
Shape broadcast_strides(const Tensor& t, const Shape& shape);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);

// Whether t is a CUDA tensor: the ops that have a CUDA form hand it to ops/cuda/dispatch.h.
inline bool on_cuda(const Tensor& t) { return t.defined() && t.device() == Device::CUDA; }
// Throws eng::Error for a CUDA tensor, before a CPU kernel reads its memory: "<op>: tensor of shape [..] is on
// cuda; <op> has no cuda kernel yet".
inline void require_cpu(const Tensor& t, const char* op) {
  ENG_CHECK(!on_cuda(t), op, ": tensor of shape ", t.shape(), " is on cuda; ", op,
            " has no cuda kernel yet (docs/cuda.md)");
}

constexpr int64_t kElementwiseGrain = 1 << 14;

// out[i] = f(a[i]) as a new contiguous tensor of a's shape and dtype. f is generic over the element type.
template <class F>
Tensor map_unary(const Tensor& a, F f) {
  require_cpu(a, "elementwise op");
  Tensor out = empty(a.shape(), a.dtype());
  ENG_DISPATCH(a.dtype(), T, {
    T* o = out.data<T>();
    const T* pa = static_cast<const T*>(a.storage()->data);
    if (a.is_contiguous()) {
      const T* x = pa + a.offset();
      parallel_for(0, a.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) o[i] = f(x[i]);
      });
    } else {
      int64_t i = 0;
      for_each_offset<1>(a.shape(), {a.strides().data()}, {a.offset()}, [&](auto off) { o[i++] = f(pa[off[0]]); });
    }
  });
  return out;
}

// map_unary with the dtype checked first, so that an i64 input is reported under the op's name.
template <class F>
Tensor map_floating(const Tensor& a, const char* op, F f) {
  if (!is_floating(a.dtype())) fail_not_floating(op);
  require_cpu(a, op);
  return map_unary(a, f);
}

// out = f(a, b) with broadcasting, as a new contiguous tensor.
template <class F>
Tensor map_binary(const Tensor& a, const Tensor& b, const char* op, F f) {
  check_same_dtype(a, b, op);
  require_cpu(a, op);
  require_cpu(b, op);
  Shape s = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(s, a.dtype());
  ENG_DISPATCH(a.dtype(), T, {
    T* o = out.data<T>();
    const T* pa = static_cast<const T*>(a.storage()->data);
    const T* pb = static_cast<const T*>(b.storage()->data);
    if (a.shape() == s && b.shape() == s && a.is_contiguous() && b.is_contiguous()) {
      const T* x = pa + a.offset();
      const T* y = pb + b.offset();
      parallel_for(0, out.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) o[i] = f(x[i], y[i]);
      });
    } else {
      Shape sa = broadcast_strides(a, s), sb = broadcast_strides(b, s);
      int64_t i = 0;
      for_each_offset<2>(s, {sa.data(), sb.data()}, {a.offset(), b.offset()},
                         [&](auto off) { o[i++] = f(pa[off[0]], pb[off[1]]); });
    }
  });
  return out;
}

}  // namespace eng
