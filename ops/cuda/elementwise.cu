// Elementwise kernels: unary functions with their derivatives, and binary arithmetic with a periodic
// second operand. Each thread handles elements i, i + stride, ... of a grid-stride loop. The kind is a
// template parameter, so each kernel's loop holds one function and no per-element switch. The formulas
// follow the CPU's scalar reference (engine/vec_kernels_scalar.cpp), in f32.
#include <type_traits>

#include "engine/cuda.h"
#include "engine/error.h"
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"

namespace eng::cuda {
namespace {

constexpr float kSqrt1_2 = 0.70710678118654752440f;      // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// Never NaN for finite x: the branch keeps exp's argument <= 0.
__device__ float sigmoid(float x) {
  if (x >= 0.f) return 1.f / (1.f + expf(-x));
  const float e = expf(x);
  return e / (1.f + e);
}

template <UnaryKind K>
__device__ float forward(float x) {
  if constexpr (K == UnaryKind::Exp) return expf(x);
  else if constexpr (K == UnaryKind::Log) return logf(x);
  else if constexpr (K == UnaryKind::Tanh) return tanhf(x);
  else if constexpr (K == UnaryKind::Sigmoid) return sigmoid(x);
  else if constexpr (K == UnaryKind::Relu) return x < 0.f ? 0.f : x;  // NaN stays NaN, as on the CPU
  // erfc(-z) = 1 + erf(z), without the cancellation of 1 + erf(z) in the lower tail
  else if constexpr (K == UnaryKind::Gelu) return 0.5f * x * erfcf(-x * kSqrt1_2);
  // 0.5 x (1 + tanh u) = x / (1 + e^{-2u}): the tanh form cancels to nothing in the lower tail
  else if constexpr (K == UnaryKind::GeluTanh)
    return x / (1.f + expf(-2.f * kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
  else if constexpr (K == UnaryKind::Silu) return x * sigmoid(x);
  else if constexpr (K == UnaryKind::Elu) return x > 0.f ? x : expm1f(x);
  else return x > 0.f ? x + 1.f : expf(x);  // EluPlusOne
}

// dy * f'(x); the piecewise kinds select dy itself (or 0) so that an infinite dy stays as the CPU has it.
template <UnaryKind K>
__device__ float backward(float x, float dy) {
  if constexpr (K == UnaryKind::Exp) return dy * expf(x);
  else if constexpr (K == UnaryKind::Log) return dy / x;
  else if constexpr (K == UnaryKind::Tanh) {
    const float t = tanhf(x);
    return dy * (1.f - t * t);
  } else if constexpr (K == UnaryKind::Sigmoid) {
    const float s = sigmoid(x);
    return dy * s * (1.f - s);
  } else if constexpr (K == UnaryKind::Relu) {
    return x > 0.f ? dy : 0.f;
  } else if constexpr (K == UnaryKind::Gelu) {  // Phi(x) + x phi(x)
    return dy * (0.5f * erfcf(-x * kSqrt1_2) + x * kInvSqrt2Pi * expf(-0.5f * x * x));
  } else if constexpr (K == UnaryKind::GeluTanh) {  // (1 + t) / 2 + x (1 - t^2) u'(x) / 2, t = tanh u
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * x * x);
    return dy * 0.5f * ((1.f + t) + x * (1.f - t * t) * du);
  } else if constexpr (K == UnaryKind::Silu) {  // s (1 + x (1 - s))
    const float s = sigmoid(x);
    return dy * s * (1.f + x * (1.f - s));
  } else {  // Elu and EluPlusOne share the derivative
    return x > 0.f ? dy : dy * expf(x);
  }
}

template <UnaryKind K>
__global__ void unary_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    y[i] = forward<K>(x[i]);
}

template <UnaryKind K>
__global__ void unary_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    dx[i] = backward<K>(x[i], dy[i]);
}

template <BinaryKind K>
__global__ void binary_kernel(const float* a, const float* b, float* out, int64_t n, int64_t b_period) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const float bv = b[b_period == n ? i : i % b_period];
    if constexpr (K == BinaryKind::Add) out[i] = a[i] + bv;
    else if constexpr (K == BinaryKind::Sub) out[i] = a[i] - bv;
    else if constexpr (K == BinaryKind::Mul) out[i] = a[i] * bv;
    else out[i] = a[i] / bv;  // IEEE division: nvcc's default -prec-div=true
  }
}

template <UnaryKind K>
using UnaryTag = std::integral_constant<UnaryKind, K>;

// Calls f with the kind as a compile-time constant.
template <class F>
void with_unary_kind(UnaryKind kind, const char* op, F&& f) {
  switch (kind) {
    case UnaryKind::Exp: return f(UnaryTag<UnaryKind::Exp>{});
    case UnaryKind::Log: return f(UnaryTag<UnaryKind::Log>{});
    case UnaryKind::Tanh: return f(UnaryTag<UnaryKind::Tanh>{});
    case UnaryKind::Sigmoid: return f(UnaryTag<UnaryKind::Sigmoid>{});
    case UnaryKind::Relu: return f(UnaryTag<UnaryKind::Relu>{});
    case UnaryKind::Gelu: return f(UnaryTag<UnaryKind::Gelu>{});
    case UnaryKind::GeluTanh: return f(UnaryTag<UnaryKind::GeluTanh>{});
    case UnaryKind::Silu: return f(UnaryTag<UnaryKind::Silu>{});
    case UnaryKind::Elu: return f(UnaryTag<UnaryKind::Elu>{});
    case UnaryKind::EluPlusOne: return f(UnaryTag<UnaryKind::EluPlusOne>{});
  }
  fail(op, ": unknown UnaryKind ", int(kind));
}

}  // namespace

void unary(UnaryKind kind, const float* x, float* y, int64_t n) {
  if (n <= 0) return;
  with_unary_kind(kind, "cuda::unary", [&](auto k) {
    unary_kernel<decltype(k)::value><<<grid_for(n, kThreads), kThreads>>>(x, y, n);
  });
  check_launch("unary_kernel");
}

void unary_backward(UnaryKind kind, const float* x, const float* dy, float* dx, int64_t n) {
  if (n <= 0) return;
  with_unary_kind(kind, "cuda::unary_backward", [&](auto k) {
    unary_backward_kernel<decltype(k)::value><<<grid_for(n, kThreads), kThreads>>>(x, dy, dx, n);
  });
  check_launch("unary_backward_kernel");
}

void binary(BinaryKind kind, const float* a, const float* b, float* out, int64_t n, int64_t b_period) {
  ENG_CHECK(b_period > 0, "cuda::binary: b_period must be > 0, got ", b_period);
  if (n <= 0) return;
  const unsigned blocks = grid_for(n, kThreads);
  switch (kind) {
    case BinaryKind::Add: binary_kernel<BinaryKind::Add><<<blocks, kThreads>>>(a, b, out, n, b_period); break;
    case BinaryKind::Sub: binary_kernel<BinaryKind::Sub><<<blocks, kThreads>>>(a, b, out, n, b_period); break;
    case BinaryKind::Mul: binary_kernel<BinaryKind::Mul><<<blocks, kThreads>>>(a, b, out, n, b_period); break;
    case BinaryKind::Div: binary_kernel<BinaryKind::Div><<<blocks, kThreads>>>(a, b, out, n, b_period); break;
    default: fail("cuda::binary: unknown BinaryKind ", int(kind));
  }
  check_launch("binary_kernel");
}

}  // namespace eng::cuda
