// Helpers of the dispatch files (ops/cuda/dispatch_*.cpp, CUDA=1 builds only): argument checks, device
// tensors, and the elementwise and column-sum kernels on whole tensors, which several ops' backwards share.
#pragma once
#include "engine/error.h"
#include "engine/tensor.h"
#include "ops/cuda/kernels.h"

namespace eng::cuda_op {

// t is defined, on CUDA and f32; `what` names the argument.
inline void check_f32(const Tensor& t, const char* op, const char* what) {
  ENG_CHECK(t.defined(), op, ": ", what, " is undefined");
  ENG_CHECK(t.device() == Device::CUDA, op, ": ", what, " of shape ", t.shape(), " is on ", device_name(t.device()),
            " while the other operands are on cuda; move it with to_device");
  ENG_CHECK(t.dtype() == DType::F32, op, ": ", what, " of shape ", t.shape(), " is ", t.dtype(),
            "; the cuda kernels are f32 only");
}

[[noreturn]] inline void unsupported(const char* op, const Shape& a, const Shape& b) {
  fail(op, ": shapes ", a, " and ", b, " are not supported on cuda yet (same shapes, or the second a trailing part "
       "of the first: a bias row)");
}

// A contiguous copy outside the graph, or t itself (detached) when it is contiguous already.
inline Tensor dense(const Tensor& t) { return t.detach().contiguous(); }
inline float* ptr(const Tensor& t) { return t.device_data<float>(); }
inline Tensor device_empty(const Shape& s) { return empty_on(s, DType::F32, Device::CUDA); }
// A one-element device tensor holding the f32 value of s (the scalar operand of the binary kernel).
inline Tensor device_scalar(double s) { return to_device(full({1}, s), Device::CUDA); }

// out[i] = a[i] op b[i % b.numel()], a and b contiguous: a new tensor of a's shape.
inline Tensor binary_kernel(cuda::BinaryKind kind, const Tensor& a, const Tensor& b) {
  Tensor out = device_empty(a.shape());
  if (a.numel() > 0) cuda::binary(kind, ptr(a), ptr(b), ptr(out), a.numel(), b.numel());
  return out;
}

// g (contiguous) summed over its leading dims down to `shape`, whose element count divides g's: the
// gradient of an operand broadcast over rows. Deterministic (cuda::sum_rows).
inline Tensor sum_rows_to(const Tensor& g, const Shape& shape) {
  const int64_t cols = shape_numel(shape);
  Tensor out = device_empty(shape);
  if (cols > 0) cuda::sum_rows(ptr(g), ptr(out), g.numel() / cols, cols);
  return out;
}

}  // namespace eng::cuda_op
