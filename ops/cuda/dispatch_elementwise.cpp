// CUDA forms of the elementwise ops (ops/binary.h, ops/unary.h, ops/activation.h, ops/bias_activation.h,
// ops/dropout.h): the kernels of ops/cuda/elementwise.cu on contiguous copies of the operands, and
// backwards from the same kernels plus column sums for a broadcast operand.
#include <cstring>

#include "engine/autograd.h"
#include "ops/cuda/dispatch.h"
#include "ops/cuda/dispatch_util.h"
#include "ops/dropout.h"

namespace eng::cuda_op {
namespace {

using cuda::BinaryKind;
using cuda::UnaryKind;

// Whether `small` is the trailing part of `big` (a row broadcast over big's leading dims).
bool is_suffix(const Shape& small, const Shape& big) {
  if (small.size() > big.size()) return false;
  return std::equal(small.begin(), small.end(), big.end() - int64_t(small.size()));
}

Tensor reduce_to(const Tensor& g, const Shape& shape) { return g.shape() == shape ? g : sum_rows_to(g, shape); }

Tensor binary_op(BinaryKind kind, const Tensor& a, const Tensor& b, const char* op) {
  check_f32(a, op, "a");
  check_f32(b, op, "b");
  if (!is_suffix(b.shape(), a.shape())) {
    const bool commutes = kind == BinaryKind::Add || kind == BinaryKind::Mul;
    if (commutes && is_suffix(a.shape(), b.shape())) return binary_op(kind, b, a, op);
    unsupported(op, a.shape(), b.shape());
  }
  const Tensor ac = dense(a), bc = dense(b);
  Tensor out = binary_kernel(kind, ac, bc);
  // add and sub need no operand for their gradients: only mul and div keep them alive
  const bool keep = kind == BinaryKind::Mul || kind == BinaryKind::Div;
  return record(out, op, {a, b}, [kind, x = keep ? ac : Tensor(), y = keep ? bc : Tensor(), sb = b.shape()](
                                     const Tensor& g) {
    const Tensor gc = dense(g);
    switch (kind) {
      case BinaryKind::Add: return std::vector<Tensor>{gc, reduce_to(gc, sb)};
      case BinaryKind::Sub:
        return std::vector<Tensor>{gc, reduce_to(binary_kernel(BinaryKind::Mul, gc, device_scalar(-1.0)), sb)};
      case BinaryKind::Mul:
        return std::vector<Tensor>{binary_kernel(BinaryKind::Mul, gc, y),
                                   reduce_to(binary_kernel(BinaryKind::Mul, gc, x), sb)};
      case BinaryKind::Div: {
        const Tensor ga = binary_kernel(BinaryKind::Div, gc, y);
        // -g a / b^2, in the CPU's order: (ga a) / b, negated
        Tensor gb = binary_kernel(BinaryKind::Div, binary_kernel(BinaryKind::Mul, ga, x), y);
        gb = binary_kernel(BinaryKind::Mul, gb, device_scalar(-1.0));
        return std::vector<Tensor>{ga, reduce_to(gb, sb)};
      }
    }
    return std::vector<Tensor>{};
  });
}

UnaryKind unary_kind(const char* op) {
  static const std::pair<const char*, UnaryKind> kinds[] = {
      {"exp", UnaryKind::Exp},          {"log", UnaryKind::Log},   {"tanh", UnaryKind::Tanh},
      {"sigmoid", UnaryKind::Sigmoid},  {"relu", UnaryKind::Relu}, {"gelu_erf", UnaryKind::Gelu},
      {"gelu_tanh", UnaryKind::GeluTanh}, {"silu", UnaryKind::Silu}, {"elu", UnaryKind::Elu}};
  for (const auto& [name, kind] : kinds)
    if (std::strcmp(name, op) == 0) return kind;
  fail(op, ": no cuda kernel for this op yet (docs/cuda.md)");
}

// dx = dy f'(x) for x, dy contiguous and of one shape.
Tensor unary_grad(UnaryKind kind, const Tensor& x, const Tensor& dy) {
  Tensor dx = device_empty(x.shape());
  if (x.numel() > 0) cuda::unary_backward(kind, ptr(x), ptr(dy), ptr(dx), x.numel());
  return dx;
}

Tensor unary_value(UnaryKind kind, const Tensor& x) {
  Tensor y = device_empty(x.shape());
  if (x.numel() > 0) cuda::unary(kind, ptr(x), ptr(y), x.numel());
  return y;
}

UnaryKind bias_activation_kind(BiasActivation act) {
  switch (act) {
    case BiasActivation::Relu: return UnaryKind::Relu;
    case BiasActivation::GeluErf: return UnaryKind::Gelu;
    case BiasActivation::GeluTanh: return UnaryKind::GeluTanh;
    case BiasActivation::None: break;
  }
  fail("bias_activation: no activation to apply");
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::Add, a, b, "add"); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::Sub, a, b, "sub"); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::Mul, a, b, "mul"); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::Div, a, b, "div"); }

Tensor add_scalar(const Tensor& a, double s) {
  check_f32(a, "add_scalar", "a");
  Tensor out = binary_kernel(BinaryKind::Add, dense(a), device_scalar(s));
  return record(out, "add_scalar", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor mul_scalar(const Tensor& a, double s) {
  check_f32(a, "mul_scalar", "a");
  Tensor out = binary_kernel(BinaryKind::Mul, dense(a), device_scalar(s));
  return record(out, "mul_scalar", {a}, [s](const Tensor& g) { return std::vector<Tensor>{mul_scalar(g, s)}; });
}

Tensor unary(const Tensor& x, const char* op) {
  check_f32(x, op, "x");
  const UnaryKind kind = unary_kind(op);
  const Tensor xc = dense(x);
  return record(unary_value(kind, xc), op, {x},
                [kind, xc](const Tensor& g) { return std::vector<Tensor>{unary_grad(kind, xc, dense(g))}; });
}

Tensor elu(const Tensor& x, double alpha) {
  ENG_CHECK(alpha == 1.0, "elu: the cuda kernel has alpha = 1, got ", alpha);
  return unary(x, "elu");
}

Tensor bias_activation(const Tensor& x, const Tensor& bias, BiasActivation act) {
  check_f32(x, "bias_activation", "x");
  if (bias.defined()) check_f32(bias, "bias_activation", "bias");
  const int64_t C = x.dim() >= 1 ? x.size(-1) : 1;
  const Tensor h = bias.defined() ? binary_kernel(BinaryKind::Add, dense(x), dense(bias)) : dense(x);
  const bool activated = act != BiasActivation::None;
  const UnaryKind kind = activated ? bias_activation_kind(act) : UnaryKind::Relu;
  Tensor y = activated ? unary_value(kind, h) : bias.defined() ? h : h.clone();
  const bool want_db = bias.defined() && bias.requires_grad();
  return record(y, "bias_activation", {x, bias},
                [h = activated ? h : Tensor(), activated, kind, want_db, C](const Tensor& g) {
                  const Tensor gc = dense(g);
                  const Tensor dh = activated ? unary_grad(kind, h, gc) : gc;
                  return std::vector<Tensor>{dh, want_db ? sum_rows_to(dh, {C}) : Tensor()};
                });
}

Tensor dropout(const Tensor& x, double p, Rng& rng) {
  check_f32(x, "dropout", "x");
  // The CPU op on ones is the mask itself (0 or 1 / (1 - p)), drawn from the same stream positions.
  const Tensor mask = to_device(eng::dropout(ones(x.shape()), p, rng, true), Device::CUDA);
  Tensor out = binary_kernel(BinaryKind::Mul, dense(x), mask);
  return record(out, "dropout", {x}, [mask](const Tensor& g) {
    return std::vector<Tensor>{binary_kernel(BinaryKind::Mul, dense(g), mask)};
  });
}

}  // namespace eng::cuda_op
