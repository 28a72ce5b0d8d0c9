#include "ops/binary.h"

#include <cmath>

#include "engine/autograd.h"
#include "ops/cuda/dispatch.h"
#include "ops/reduce.h"
#include "ops/vec_map.h"

namespace eng {

ENG_REGISTER_OP("add");
ENG_REGISTER_OP("sub");
ENG_REGISTER_OP("mul");
ENG_REGISTER_OP("div");
ENG_REGISTER_OP("pow");
ENG_REGISTER_OP("maximum");
ENG_REGISTER_OP("minimum");
ENG_REGISTER_OP("add_scalar");
ENG_REGISTER_OP("mul_scalar");
ENG_REGISTER_OP("pow_scalar");
ENG_REGISTER_OP("rdiv_scalar");

Tensor add(const Tensor& a, const Tensor& b) {
  if (on_cuda(a) || on_cuda(b)) return cuda_op::add(a, b);
  Tensor out = map_binary_vec(a, b, "add", vec_kernels().add, [](auto x, auto y) { return x + y; });
  return record(out, "add", {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  if (on_cuda(a) || on_cuda(b)) return cuda_op::sub(a, b);
  Tensor out = map_binary_vec(a, b, "sub", vec_kernels().sub, [](auto x, auto y) { return x - y; });
  return record(out, "sub", {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(mul_scalar(g, -1.0), sb)};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  if (on_cuda(a) || on_cuda(b)) return cuda_op::mul(a, b);
  Tensor out = map_binary_vec(a, b, "mul", vec_kernels().mul, [](auto x, auto y) { return x * y; });
  return record(out, "mul", {a, b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
    return std::vector<Tensor>{sum_to(mul(g, b), a.shape()), sum_to(mul(g, a), b.shape())};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  if (on_cuda(a) || on_cuda(b)) return cuda_op::div(a, b);
  Tensor out = map_binary_vec(a, b, "div", vec_kernels().div, [](auto x, auto y) { return x / y; });
  return record(out, "div", {a, b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
    Tensor ga = div(g, b);
    Tensor gb = mul_scalar(div(mul(ga, a), b), -1.0);  // -g a / b^2
    return std::vector<Tensor>{sum_to(ga, a.shape()), sum_to(gb, b.shape())};
  });
}

Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = map_binary(a, b, "pow", [](auto x, auto y) { return std::pow(x, y); });
  return record(out, "pow", {a, b}, [a = a.detach(), b = b.detach(), y = out.detach()](const Tensor& g) {
    Tensor ga = mul(g, map_binary(a, b, "pow", [](auto x, auto e) { return e * std::pow(x, e - 1); }));
    Tensor gb = mul(g, mul(y, map_unary(a, [](auto x) { return std::log(x); })));
    return std::vector<Tensor>{sum_to(ga, a.shape()), sum_to(gb, b.shape())};
  });
}

namespace {

// Gradient of max/min: g flows to a where `pick_a(a, b)`, else to b.
template <class Pick>
std::vector<Tensor> select_grad(const Tensor& g, const Tensor& a, const Tensor& b, Pick pick_a) {
  using std::vector;
  Tensor to_a = map_binary(a, b, "maximum", [&](auto x, auto y) { return decltype(x)(pick_a(x, y) ? 1 : 0); });
  Tensor ga = mul(g, to_a);
  Tensor gb = sub(g, ga);
  return vector<Tensor>{sum_to(ga, a.shape()), sum_to(gb, b.shape())};
}

}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  Tensor out = map_binary(a, b, "maximum", [](auto x, auto y) { return x >= y ? x : y; });
  return record(out, "maximum", {a, b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
    return select_grad(g, a, b, [](auto x, auto y) { return x >= y; });
  });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  Tensor out = map_binary(a, b, "minimum", [](auto x, auto y) { return x <= y ? x : y; });
  return record(out, "minimum", {a, b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
    return select_grad(g, a, b, [](auto x, auto y) { return x <= y; });
  });
}

Tensor add_scalar(const Tensor& a, double s) {
  if (on_cuda(a)) return cuda_op::add_scalar(a, s);
  Tensor out = map_unary(a, [s](auto x) { return x + decltype(x)(s); });
  return record(out, "add_scalar", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor mul_scalar(const Tensor& a, double s) {
  if (on_cuda(a)) return cuda_op::mul_scalar(a, s);
  Tensor out = map_unary(a, [s](auto x) { return x * decltype(x)(s); });
  return record(out, "mul_scalar", {a}, [s](const Tensor& g) { return std::vector<Tensor>{mul_scalar(g, s)}; });
}

Tensor pow_scalar(const Tensor& a, double p) {
  Tensor out = map_unary(a, [p](auto x) { return std::pow(x, decltype(x)(p)); });
  return record(out, "pow_scalar", {a}, [a = a.detach(), p](const Tensor& g) {
    return std::vector<Tensor>{mul(g, map_unary(a, [p](auto x) { return decltype(x)(p) * std::pow(x, decltype(x)(p - 1)); }))};
  });
}

Tensor rdiv_scalar(double s, const Tensor& a) {
  Tensor out = map_unary(a, [s](auto x) { return decltype(x)(s) / x; });
  return record(out, "rdiv_scalar", {a}, [a = a.detach(), s](const Tensor& g) {
    return std::vector<Tensor>{mul(g, map_unary(a, [s](auto x) { return -decltype(x)(s) / (x * x); }))};
  });
}

}  // namespace eng
