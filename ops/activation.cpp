#include "ops/activation.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd.h"
#include "ops/cuda/dispatch.h"
#include "ops/vec_map.h"

namespace eng {

ENG_REGISTER_OP("relu");
ENG_REGISTER_OP("gelu_erf");
ENG_REGISTER_OP("gelu_tanh");
ENG_REGISTER_OP("elu");
ENG_REGISTER_OP("sigmoid");
ENG_REGISTER_OP("tanh");
ENG_REGISTER_OP("softplus");
ENG_REGISTER_OP("silu");

namespace {

// 1 / (1 + exp(-x)) without overflow: exp is only ever taken of a non-positive number.
template <class T>
T stable_sigmoid(T x) {
  if (x >= 0) return 1 / (1 + std::exp(-x));
  T e = std::exp(x);
  return e / (1 + e);
}

constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

}  // namespace

Tensor relu(const Tensor& x) {
  if (on_cuda(x)) return cuda_op::unary(x, "relu");
  Tensor out = map_floating(x, "relu", [](auto v) { return v < 0 ? decltype(v)(0) : v; });  // NaN stays NaN
  // y > 0 exactly where x > 0, so the output serves as the mask
  return record(out, "relu", {x}, [y = out.detach()](const Tensor& g) {
    return std::vector<Tensor>{
        map_binary(g, y, "relu", [](auto gi, auto yi) { return yi > 0 ? gi : decltype(gi)(0); })};
  });
}

Tensor gelu(const Tensor& x, GeluForm form) {
  if (on_cuda(x)) return cuda_op::unary(x, form == GeluForm::Erf ? "gelu_erf" : "gelu_tanh");
  if (form == GeluForm::Erf) {
    Tensor out = map_unary_vec(x, "gelu_erf", vec_kernels().gelu_erf, [](auto v) {
      using T = decltype(v);
      return T(0.5) * v * (1 + std::erf(v * T(kSqrt1_2)));
    });
    // d/dx = Phi(x) + x phi(x), with Phi the normal CDF and phi its density
    return record(out, "gelu_erf", {x}, [x = x.detach()](const Tensor& g) {
      return std::vector<Tensor>{map_binary_vec(g, x, "gelu_erf", vec_kernels().gelu_erf_backward, [](auto gi, auto v) {
        using T = decltype(v);
        T cdf = T(0.5) * (1 + std::erf(v * T(kSqrt1_2)));
        T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * v * v);
        return gi * (cdf + v * pdf);
      })};
    });
  }
  Tensor out = map_unary_vec(x, "gelu_tanh", vec_kernels().gelu_tanh, [](auto v) {
    using T = decltype(v);
    return T(0.5) * v * (1 + std::tanh(T(kSqrt2OverPi) * (v + T(kGeluCubic) * v * v * v)));
  });
  // with u = k (x + c x^3), t = tanh(u): d/dx = (1 + t) / 2 + x (1 - t^2) k (1 + 3 c x^2) / 2
  return record(out, "gelu_tanh", {x}, [x = x.detach()](const Tensor& g) {
    return std::vector<Tensor>{map_binary_vec(g, x, "gelu_tanh", vec_kernels().gelu_tanh_backward, [](auto gi, auto v) {
      using T = decltype(v);
      T t = std::tanh(T(kSqrt2OverPi) * (v + T(kGeluCubic) * v * v * v));
      T du = T(kSqrt2OverPi) * (1 + 3 * T(kGeluCubic) * v * v);
      return gi * T(0.5) * ((1 + t) + v * (1 - t * t) * du);
    })};
  });
}

Tensor elu(const Tensor& x, double alpha) {
  if (on_cuda(x)) return cuda_op::elu(x, alpha);
  const auto elu_k = [alpha](const float* a, float* y, int64_t n) { vec_kernels().elu(a, y, n, float(alpha)); };
  Tensor out = map_unary_vec(x, "elu", elu_k, [alpha](auto v) {
    using T = decltype(v);
    return v > 0 ? v : T(alpha) * std::expm1(v);
  });
  // from the input, not the output: the sign of y only matches that of x when alpha > 0
  return record(out, "elu", {x}, [x = x.detach(), alpha](const Tensor& g) {
    const auto elu_backward_k = [alpha](const float* gi, const float* a, float* d, int64_t n) {
      vec_kernels().elu_backward(gi, a, d, n, float(alpha));
    };
    return std::vector<Tensor>{map_binary_vec(g, x, "elu", elu_backward_k, [alpha](auto gi, auto v) {
      using T = decltype(v);
      return v > 0 ? gi : gi * T(alpha) * std::exp(v);
    })};
  });
}

Tensor sigmoid(const Tensor& x) {
  if (on_cuda(x)) return cuda_op::unary(x, "sigmoid");
  Tensor out = map_unary_vec(x, "sigmoid", vec_kernels().sigmoid, [](auto v) { return stable_sigmoid(v); });
  return record(out, "sigmoid", {x}, [y = out.detach()](const Tensor& g) {
    return std::vector<Tensor>{map_binary(g, y, "sigmoid", [](auto gi, auto yi) { return gi * yi * (1 - yi); })};
  });
}

Tensor tanh(const Tensor& x) {
  if (on_cuda(x)) return cuda_op::unary(x, "tanh");
  Tensor out = map_unary_vec(x, "tanh", vec_kernels().tanh, [](auto v) { return std::tanh(v); });
  return record(out, "tanh", {x}, [y = out.detach()](const Tensor& g) {
    return std::vector<Tensor>{map_binary(g, y, "tanh", [](auto gi, auto yi) { return gi * (1 - yi * yi); })};
  });
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  ENG_CHECK(beta > 0 && std::isfinite(beta), "softplus: beta must be positive and finite, got ", beta,
            " for input of shape ", x.shape());
  // log(1 + e^z) = max(z, 0) + log1p(e^-|z|): exp never overflows, even with a huge threshold
  Tensor out = map_floating(x, "softplus", [beta, threshold](auto v) {
    using T = decltype(v);
    T z = T(beta) * v;
    if (z > threshold) return v;
    return (std::max(z, T(0)) + std::log1p(std::exp(-std::abs(z)))) / T(beta);
  });
  return record(out, "softplus", {x}, [x = x.detach(), beta, threshold](const Tensor& g) {
    return std::vector<Tensor>{map_binary(g, x, "softplus", [beta, threshold](auto gi, auto v) {
      using T = decltype(v);
      T z = T(beta) * v;
      return z > threshold ? gi : gi * stable_sigmoid(z);
    })};
  });
}

Tensor silu(const Tensor& x) {
  if (on_cuda(x)) return cuda_op::unary(x, "silu");
  Tensor out = map_unary_vec(x, "silu", vec_kernels().silu, [](auto v) { return v * stable_sigmoid(v); });
  // d/dx x s(x) = s (1 + x (1 - s))
  return record(out, "silu", {x}, [x = x.detach()](const Tensor& g) {
    return std::vector<Tensor>{map_binary_vec(g, x, "silu", vec_kernels().silu_backward, [](auto gi, auto v) {
      auto s = stable_sigmoid(v);
      return gi * s * (1 + v * (1 - s));
    })};
  });
}

}  // namespace eng
