#include "ops/bias_activation.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "engine/autograd.h"
#include "engine/threadpool.h"
#include "engine/vec_kernels.h"
#include "ops/cuda/dispatch.h"
#include "ops/kernel_util.h"
#include "ops/reduce.h"

namespace eng {

ENG_REGISTER_OP("bias_activation");

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

constexpr int64_t kGrain = 1 << 14;  // elements per parallel chunk
constexpr int64_t kColBlock = 256;   // columns of the f64 bias gradient per parallel task

bool is_gelu(BiasActivation act) { return act == BiasActivation::GeluErf || act == BiasActivation::GeluTanh; }

int64_t row_grain(int64_t C) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)); }

// The exact formulas of ops/activation.cpp, for f64.
template <class T>
T activate(T v, BiasActivation act) {
  switch (act) {
    case BiasActivation::None: return v;
    case BiasActivation::Relu: return v < 0 ? T(0) : v;  // NaN stays NaN
    case BiasActivation::GeluErf: return T(0.5) * v * (1 + std::erf(v * T(kSqrt1_2)));
    case BiasActivation::GeluTanh:
      return T(0.5) * v * (1 + std::tanh(T(kSqrt2OverPi) * (v + T(kGeluCubic) * v * v * v)));
  }
  return v;
}

// g * act'(h), from the saved pre-activation h (gelu) or the output y (relu: y > 0 exactly where h > 0).
template <class T>
T activate_backward(T g, T s, BiasActivation act) {
  switch (act) {
    case BiasActivation::None: return g;
    case BiasActivation::Relu: return s > 0 ? g : T(0);
    case BiasActivation::GeluErf: {
      T cdf = T(0.5) * (1 + std::erf(s * T(kSqrt1_2)));
      T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * s * s);
      return g * (cdf + s * pdf);
    }
    case BiasActivation::GeluTanh: {
      T t = std::tanh(T(kSqrt2OverPi) * (s + T(kGeluCubic) * s * s * s));
      T du = T(kSqrt2OverPi) * (1 + 3 * T(kGeluCubic) * s * s);
      return g * T(0.5) * ((1 + t) + s * (1 - t * t) * du);
    }
  }
  return g;
}

// Rows [lo, hi) of C columns: y = act(x + b). With a bias, the pre-activation goes to h when given (gelu
// keeps it for the backward), else straight into y; without one it is x itself.
template <class T>
void forward_rows(const T* x, const T* b, T* h, T* y, int64_t lo, int64_t hi, int64_t C, BiasActivation act) {
  for (int64_t r = lo; r < hi; ++r) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    T* hw = h ? h + r * C : yr;
    const T* hr = b ? hw : xr;
    if constexpr (std::is_same_v<T, float>) {
      const VecKernels& vk = vec_kernels();
      if (b) vk.add(xr, b, hw, C);
      switch (act) {
        case BiasActivation::None:
          if (!b) std::copy(xr, xr + C, yr);
          break;
        case BiasActivation::Relu:
          for (int64_t c = 0; c < C; ++c) yr[c] = hr[c] < 0 ? 0.f : hr[c];
          break;
        case BiasActivation::GeluErf: vk.gelu_erf(hr, yr, C); break;
        case BiasActivation::GeluTanh: vk.gelu_tanh(hr, yr, C); break;
      }
    } else {
      for (int64_t c = 0; c < C; ++c) {
        T v = b ? xr[c] + b[c] : xr[c];
        if (h) hw[c] = v;
        yr[c] = activate(v, act);
      }
    }
  }
}

// dh = g * act'(.) over rows [lo, hi), from s: the saved pre-activation (gelu) or output (relu).
template <class T>
void backward_rows(const T* g, const T* s, T* dh, int64_t lo, int64_t hi, int64_t C, BiasActivation act) {
  for (int64_t r = lo; r < hi; ++r) {
    const T* gr = g + r * C;
    const T* sr = s + r * C;
    T* dr = dh + r * C;
    if constexpr (std::is_same_v<T, float>) {
      if (act == BiasActivation::GeluErf) {
        vec_kernels().gelu_erf_backward(gr, sr, dr, C);
        continue;
      }
      if (act == BiasActivation::GeluTanh) {
        vec_kernels().gelu_tanh_backward(gr, sr, dr, C);
        continue;
      }
    }
    for (int64_t c = 0; c < C; ++c) dr[c] = activate_backward(gr[c], sr[c], act);
  }
}

// out[c] = sum over the N rows of d[r, c]. Each task owns a fixed block of columns and sums its rows in
// order, so the result does not depend on how blocks fall to threads.
int64_t column_blocks(int64_t C) { return (C + kColBlock - 1) / kColBlock; }
int64_t block_grain(int64_t N) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(N * kColBlock, 1)); }

// f32: the same order of additions as sum() over leading axes (ops/reduce.h).
void column_sums(const float* d, float* out, int64_t N, int64_t C) { sum_rows_f32(d, N, C, out); }

// f64: each column summed over the rows in order.
void column_sums(const double* d, double* out, int64_t N, int64_t C) {
  parallel_for(0, column_blocks(C), block_grain(N), [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t c0 = blk * kColBlock, w = std::min(kColBlock, C - c0);
      std::fill(out + c0, out + c0 + w, 0.0);
      for (int64_t r = 0; r < N; ++r)
        for (int64_t j = 0; j < w; ++j) out[c0 + j] += d[r * C + c0 + j];
    }
  });
}

}  // namespace

Tensor bias_activation(const Tensor& x, const Tensor& bias, BiasActivation act) {
  ENG_CHECK(x.defined(), "bias_activation: undefined input");
  if (!is_floating(x.dtype())) fail_not_floating("bias_activation");
  if (bias.defined()) {
    ENG_CHECK(bias.dtype() == x.dtype(), "bias_activation: dtypes differ (x ", dtype_name(x.dtype()), " ", x.shape(),
              ", bias ", dtype_name(bias.dtype()), " ", bias.shape(), ")");
    ENG_CHECK(x.dim() >= 1 && bias.dim() == 1 && bias.size(0) == x.size(-1), "bias_activation: bias of shape ",
              bias.shape(), " does not match input of shape ", x.shape(), " (expected [x.size(-1)])");
  }
  if (on_cuda(x)) return cuda_op::bias_activation(x, bias, act);
  // detached, so that making them contiguous records nothing: the node below takes x and bias themselves
  const Tensor xc = x.detach().contiguous();
  const Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  const int64_t C = x.dim() >= 1 ? x.size(-1) : 1;
  const int64_t N = C > 0 ? x.numel() / C : 0;
  Tensor y = empty(x.shape(), x.dtype());
  // gelu's derivative needs the pre-activation: a new tensor with a bias, the input itself without
  Tensor h = !is_gelu(act) ? Tensor() : bc.defined() ? empty(x.shape(), x.dtype()) : xc;
  ENG_DISPATCH(x.dtype(), T, {
    const T* px = xc.data<T>();
    const T* pb = bc.defined() ? bc.data<T>() : nullptr;
    T* ph = h.defined() && bc.defined() ? h.data<T>() : nullptr;
    T* py = y.data<T>();
    parallel_for(0, N, row_grain(C), [&](int64_t lo, int64_t hi) { forward_rows(px, pb, ph, py, lo, hi, C, act); });
  });
  const Tensor saved = act == BiasActivation::Relu ? y.detach() : h;
  const bool want_db = bias.defined() && bias.requires_grad();
  return record(y, "bias_activation", {x, bias}, [saved, act, want_db, N, C](const Tensor& g) {
    const Tensor gc = g.contiguous();
    Tensor dh = act == BiasActivation::None ? gc : empty(gc.shape(), gc.dtype());
    Tensor db = want_db ? empty({C}, gc.dtype()) : Tensor();
    ENG_DISPATCH(gc.dtype(), T, {
      if (act != BiasActivation::None) {
        const T* pg = gc.data<T>();
        const T* ps = saved.data<T>();
        T* pd = dh.data<T>();
        parallel_for(0, N, row_grain(C),
                     [&](int64_t lo, int64_t hi) { backward_rows(pg, ps, pd, lo, hi, C, act); });
      }
      if (want_db) column_sums(dh.data<T>(), db.data<T>(), N, C);
    });
    return std::vector<Tensor>{dh, db};
  });
}

}  // namespace eng
