#include "ops/unary.h"

#include <cmath>

#include "engine/autograd.h"
#include "ops/binary.h"
#include "ops/cuda/dispatch.h"
#include "ops/vec_map.h"

namespace eng {

ENG_REGISTER_OP("exp");
ENG_REGISTER_OP("log");
ENG_REGISTER_OP("sqrt");
ENG_REGISTER_OP("rsqrt");
ENG_REGISTER_OP("abs");
ENG_REGISTER_OP("clamp");

Tensor exp(const Tensor& a) {
  if (on_cuda(a)) return cuda_op::unary(a, "exp");
  Tensor out = map_unary_vec(a, "exp", vec_kernels().exp, [](auto x) { return std::exp(x); });
  return record(out, "exp", {a}, [y = out.detach()](const Tensor& g) {
    return std::vector<Tensor>{map_binary_vec(g, y, "exp", vec_kernels().mul, [](auto gi, auto yi) { return gi * yi; })};
  });
}

Tensor log(const Tensor& a) {
  if (on_cuda(a)) return cuda_op::unary(a, "log");
  Tensor out = map_unary_vec(a, "log", vec_kernels().log, [](auto x) { return std::log(x); });
  return record(out, "log", {a}, [a = a.detach()](const Tensor& g) {
    return std::vector<Tensor>{map_binary_vec(g, a, "log", vec_kernels().div, [](auto gi, auto x) { return gi / x; })};
  });
}

Tensor sqrt(const Tensor& a) {
  Tensor out = map_floating(a, "sqrt", [](auto x) { return std::sqrt(x); });
  return record(out, "sqrt", {a}, [y = out.detach()](const Tensor& g) {
    return std::vector<Tensor>{map_binary(g, y, "sqrt", [](auto gi, auto yi) { return gi / (2 * yi); })};
  });
}

Tensor rsqrt(const Tensor& a) {
  Tensor out = map_floating(a, "rsqrt", [](auto x) { return 1 / std::sqrt(x); });
  // d/dx x^(-1/2) = -x^(-3/2) / 2 = -y^3 / 2
  return record(out, "rsqrt", {a}, [y = out.detach()](const Tensor& g) {
    return std::vector<Tensor>{map_binary(g, y, "rsqrt", [](auto gi, auto yi) { return gi * yi * yi * yi / -2; })};
  });
}

Tensor abs(const Tensor& a) {
  Tensor out = map_floating(a, "abs", [](auto x) { return std::abs(x); });
  return record(out, "abs", {a}, [a = a.detach()](const Tensor& g) {
    return std::vector<Tensor>{map_binary(g, a, "abs", [](auto gi, auto x) {
      using T = decltype(x);
      return x > 0 ? gi : x < 0 ? -gi : T(0);
    })};
  });
}

Tensor clamp(const Tensor& a, double lo, double hi) {
  ENG_CHECK(!std::isnan(lo) && !std::isnan(hi), "clamp: bounds must not be NaN, got lo = ", lo, ", hi = ", hi,
            " for input of shape ", a.shape());
  ENG_CHECK(lo <= hi, "clamp: lo = ", lo, " exceeds hi = ", hi, " for input of shape ", a.shape());
  Tensor out = map_floating(a, "clamp", [lo, hi](auto x) {
    using T = decltype(x);
    return x < lo ? T(lo) : x > hi ? T(hi) : x;
  });
  return record(out, "clamp", {a}, [a = a.detach(), lo, hi](const Tensor& g) {
    return std::vector<Tensor>{map_binary(g, a, "clamp", [lo, hi](auto gi, auto x) {
      using T = decltype(x);
      return x > lo && x < hi ? gi : T(0);
    })};
  });
}

Tensor neg(const Tensor& a) { return mul_scalar(a, -1.0); }

}  // namespace eng
