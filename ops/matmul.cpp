#include "ops/matmul.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "engine/vec_kernels.h"
#include "ops/bias_activation.h"
#include "ops/cuda/dispatch.h"
#include "ops/gemm.h"
#include "ops/kernel_util.h"
#include "ops/mixed_precision.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "ops/weight_panels.h"

namespace eng {

ENG_REGISTER_OP("matmul");
ENG_REGISTER_OP("linear");

namespace {

// Batched product of a [..., M, K] and b [..., K, N], both at least 2-D, batch dims broadcast; f32 products in
// `precision` (ops/mixed_precision.h); `bias` (contiguous [N], or undefined) starts every row of the result.
Tensor batched_matmul(const Tensor& a, const Tensor& b, GemmPrecision precision, const Tensor& bias = Tensor()) {
  require_cpu(a, "matmul");
  require_cpu(b, "matmul");
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = empty(out_shape, a.dtype());
  // Batch offsets of each operand (stride 0 on broadcast batch dims).
  Shape full_a = batch, full_b = batch;
  full_a.insert(full_a.end(), {M, K});
  full_b.insert(full_b.end(), {K, N});
  Shape sa = broadcast_strides(a, full_a), sb = broadcast_strides(b, full_b);
  std::vector<int64_t> offs_a, offs_b;
  for_each_offset<2>(batch, {sa.data(), sb.data()}, {a.offset(), b.offset()}, [&](auto o) {
    offs_a.push_back(o[0]);
    offs_b.push_back(o[1]);
  });
  const int64_t nb = int64_t(offs_a.size());
  const int64_t a_rs = sa[sa.size() - 2], a_cs = sa[sa.size() - 1], b_rs = sb[sb.size() - 2], b_cs = sb[sb.size() - 1];
  // When every item multiplies the same B and A's items follow each other M rows apart (a Linear layer on
  // [batch, tokens, features]), the batch is one product of nb * M rows: B is packed once, rows split over threads.
  // With M == 1 the row stride means nothing (broadcast_strides gives a size-1 dim stride 0), so items at any
  // fixed step qualify: a Linear layer on [B, 1, d] in generation is then one product of B rows, not B GEMVs
  // that each read all of the weight.
  const int64_t row_step = M == 1 && nb > 1 ? offs_a[1] - offs_a[0] : a_rs;
  bool one_product = nb > 0;
  for (int64_t i = 0; i < nb; ++i)
    one_product = one_product && offs_b[size_t(i)] == offs_b[0] && offs_a[size_t(i)] == offs_a[0] + i * M * row_step;
  ENG_DISPATCH(a.dtype(), T, {
    const T* pa = static_cast<const T*>(a.storage()->data);
    const T* pb = static_cast<const T*>(b.storage()->data);
    T* pc = out.data<T>();
    auto product = [&](int64_t i, int64_t rows, int64_t a_row_stride) {
      GemmArgs<T> g;
      g.M = rows, g.N = N, g.K = K;
      g.A = pa + offs_a[size_t(i)], g.a_rs = a_row_stride, g.a_cs = a_cs;
      g.B = pb + offs_b[size_t(i)], g.b_rs = b_rs, g.b_cs = b_cs;
      g.C = pc + i * M * N, g.c_rs = N;
      if constexpr (std::is_same_v<T, float>) g.precision = precision;
      if (bias.defined()) g.bias = bias.data<T>();
      gemm(g);
    };
    // gemm splits a large product over the threads itself; many items go one per thread instead. The
    // bits are the same either way (ops/gemm.h).
    if (one_product)
      product(0, nb * M, row_step);
    else if (nb >= 2 * num_threads())
      parallel_for(0, nb, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) product(i, M, a_rs);
      });
    else
      for (int64_t i = 0; i < nb; ++i) product(i, M, a_rs);
  });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same_dtype(a, b, "matmul");
  ENG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got a ", a.shape(), " and b ",
            b.shape());
  const int64_t kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  ENG_CHECK(a.size(-1) == kb, "matmul: inner dimensions differ: a ", a.shape(), " · b ", b.shape());
  if (a.dim() == 1 || b.dim() == 1) {
    Tensor a2 = a.dim() == 1 ? unsqueeze(a, 0) : a;
    Tensor b2 = b.dim() == 1 ? unsqueeze(b, 1) : b;
    Tensor r = matmul(a2, b2);
    if (a.dim() == 1) r = squeeze(r, -2);
    if (b.dim() == 1) r = squeeze(r, -1);
    return r;
  }
  if (on_cuda(a) || on_cuda(b)) return cuda_op::matmul(a, b);
  const GemmPrecision precision = matmul_precision();
  Tensor out = batched_matmul(a, b, precision);
  return record(out, "matmul", {a, b}, [a = a.detach(), b = b.detach(), precision](const Tensor& g) {
    Tensor ga = sum_to(batched_matmul(g, transpose(b), precision), a.shape());
    Tensor gb = sum_to(batched_matmul(transpose(a), g, precision), b.shape());
    return std::vector<Tensor>{ga, gb};
  });
}

namespace {

// Generation's products: 3 to 48 rows times weights whose panels the thread's WeightPanels keeps
// (ops/weight_panels.h). The cache, or null where that does not apply (no cache, a gradient to record, other dtypes).
WeightPanels* panels_for(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases,
                         GemmPrecision precision) {
  WeightPanels* cache = active_weight_panels();
  if (!cache || precision != GemmPrecision::F32 || x.dtype() != DType::F32 || !x.is_contiguous() ||
      weights[0].dim() != 2)
    return nullptr;
  const int64_t in = weights[0].size(1), rows = x.numel() / std::max<int64_t>(in, 1);
  if (rows < 3 || rows > 48 || x.size(-1) != in) return nullptr;
  for (size_t i = 0; i < weights.size(); ++i) {
    const Tensor &w = weights[i], &b = biases[i];
    if (w.dtype() != DType::F32 || !w.is_contiguous() || w.dim() != 2 || w.size(1) != in || on_cuda(w) ||
        !b.defined() || b.dtype() != DType::F32 || b.dim() != 1 || b.size(0) != w.size(0) ||
        (grad_enabled() && (x.requires_grad() || w.requires_grad() || b.requires_grad())))
      return nullptr;
  }
  return cache;
}

// bias_activation's relu, as it maps each value (NaN and -0 kept).
void relu_row(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0 ? 0.f : x[i];
}

// y [rows, N] = then(x · Bᵀ + bias) against B's panels.
Tensor product_with_panels(const Tensor& x, int64_t N, const PackedB& b, const GemmArgs<float>& weight_args,
                           const float* bias, RowMap then = nullptr) {
  std::vector<int64_t> shape = x.shape();
  shape.back() = N;
  Tensor y = empty(shape, DType::F32);
  GemmArgs<float> g = weight_args;
  g.M = x.numel() / std::max<int64_t>(g.K, 1), g.N = N;
  g.A = x.data<float>(), g.a_rs = g.K, g.a_cs = 1;
  g.C = y.data<float>(), g.c_rs = N;
  g.bias = bias;
  gemm(g, b, then);
  return y;
}

Tensor linear_with_panels(const Tensor& x, const Tensor& weight, const Tensor& bias, GemmPrecision precision,
                          RowMap then = nullptr) {
  WeightPanels* cache = panels_for(x, {weight}, {bias}, precision);
  if (!cache) return Tensor();
  GemmArgs<float> g;
  g.N = weight.size(0), g.K = weight.size(1);
  g.B = weight.data<float>(), g.b_rs = 1, g.b_cs = g.K;  // Wᵀ
  const Tensor b = bias.contiguous();
  return product_with_panels(x, g.N, cache->get(g), g, b.data<float>(), then);
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  ENG_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: x ", x.shape(),
            " and weight ", weight.shape(), " do not fit (weight is [out, in], x ends in in)");
  ENG_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias ", bias.shape(), " does not match weight ",
            weight.shape());
  check_same_dtype(x, weight, "linear");
  check_same_dtype(x, bias, "linear");
  if (x.dim() == 1 || on_cuda(x) || on_cuda(weight))
    return bias_activation(matmul(x, transpose(weight, 0, 1)), bias, BiasActivation::None);
  const GemmPrecision precision = matmul_precision();
  if (Tensor y = linear_with_panels(x, weight, bias, precision); y.defined()) return y;
  Tensor out = batched_matmul(x, transpose(weight, 0, 1), precision, bias.detach().contiguous());
  return record(out, "linear", {x, weight, bias}, [x = x.detach(), w = weight.detach(), precision](const Tensor& g) {
    const Tensor g2 = reshape(g, {-1, w.size(0)}), x2 = reshape(x, {-1, w.size(1)});
    return std::vector<Tensor>{batched_matmul(g, w, precision), batched_matmul(transpose(g2, 0, 1), x2, precision),
                               sum(g2, {0})};
  });
}

Tensor linear_activation(const Tensor& x, const Tensor& weight, const Tensor& bias, BiasActivation act) {
  RowMap then = nullptr;
  switch (act) {
    case BiasActivation::None: return linear(x, weight, bias);
    case BiasActivation::Relu: then = relu_row; break;
    case BiasActivation::GeluErf: then = vec_kernels().gelu_erf; break;
    case BiasActivation::GeluTanh: then = vec_kernels().gelu_tanh; break;
  }
  const bool panels = x.dim() >= 2 && !on_cuda(x) && !on_cuda(weight) && x.size(-1) == weight.size(1);
  if (Tensor y = panels ? linear_with_panels(x, weight, bias, matmul_precision(), then) : Tensor(); y.defined())
    return y;
  return bias_activation(linear(x, weight, bias), Tensor(), act);
}

std::vector<Tensor> linear_stacked(const Tensor& x, const std::vector<Tensor>& weights,
                                   const std::vector<Tensor>& biases) {
  ENG_CHECK(!weights.empty() && weights.size() == biases.size(), "linear_stacked: ", weights.size(), " weights and ",
            biases.size(), " biases");
  WeightPanels* cache = x.dim() >= 1 && !on_cuda(x) ? panels_for(x, weights, biases, matmul_precision()) : nullptr;
  if (!cache) return {};
  std::vector<const float*> ptrs;
  std::vector<int64_t> rows;
  std::vector<float> bias;
  for (size_t i = 0; i < weights.size(); ++i) {
    ptrs.push_back(weights[i].data<float>());
    rows.push_back(weights[i].size(0));
    const Tensor b = biases[i].contiguous();
    bias.insert(bias.end(), b.data<float>(), b.data<float>() + b.numel());
  }
  GemmArgs<float> g;
  g.K = weights[0].size(1);
  const Tensor y = product_with_panels(x, int64_t(bias.size()), cache->get_stacked(ptrs, rows, g.K), g, bias.data());
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t n : rows) {
    out.push_back(narrow(y, y.dim() - 1, at, n));
    at += n;
  }
  return out;
}

}  // namespace eng
