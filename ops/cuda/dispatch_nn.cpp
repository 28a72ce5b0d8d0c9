// CUDA forms of matmul (ops/matmul.h), softmax (ops/softmax.h), the norms (ops/norm.h), embedding (ops/index.h),
// cross-entropy (ops/loss.h) and the sums of bias gradients (ops/reduce.h), on the kernels of ops/cuda/.
#include <algorithm>

#include "engine/autograd.h"
#include "ops/cuda/dispatch.h"
#include "ops/cuda/dispatch_util.h"
#include "ops/kernel_util.h"
#include "ops/view.h"

namespace eng::cuda_op {
namespace {

// How the gemm kernel reads one operand: its last two dims as a matrix, stored as is or transposed, with a
// leading dimension, and its batch items `stride` elements apart (0: one matrix for every item).
struct Operand {
  const float* p;
  bool trans;
  int64_t ld, stride;
};

// The operand form of t [..., R, C] with its batch dims broadcast to `batch`; false when the strides do not
// allow one (the caller then gathers t into a contiguous copy and asks again).
bool as_operand(const Tensor& t, const Shape& batch, Operand& o) {
  const int64_t R = t.size(-2), C = t.size(-1), rs = t.strides()[size_t(t.dim() - 2)],
                cs = t.strides()[size_t(t.dim() - 1)];
  if ((cs == 1 || C == 1) && (R == 1 || rs >= C)) {
    o.trans = false;
    o.ld = R == 1 ? std::max<int64_t>(C, 1) : rs;
  } else if ((rs == 1 || R == 1) && (C == 1 || cs >= R)) {
    o.trans = true;
    o.ld = C == 1 ? std::max<int64_t>(R, 1) : cs;
  } else {
    return false;
  }
  // Batch item i sits at i * stride: each batch dim's stride must be that stride times the items after it.
  const size_t lead = batch.size() - size_t(t.dim() - 2);
  Shape st(batch.size(), 0);
  for (size_t d = lead; d < batch.size(); ++d) st[d] = t.shape()[d - lead] == 1 ? 0 : t.strides()[d - lead];
  int64_t stride = -1, after = 1;
  for (size_t d = batch.size(); d-- > 0;) {
    if (batch[d] == 1) continue;
    if (stride < 0) stride = st[d] / after;
    if (st[d] != stride * after) return false;
    after *= batch[d];
  }
  o.stride = std::max<int64_t>(stride, 0);
  o.p = ptr(t);
  return true;
}

Operand operand(Tensor& t, const Shape& batch) {
  Operand o{};
  if (as_operand(t, batch, o)) return o;
  t = dense(t);
  ENG_CHECK(as_operand(t, batch, o), "matmul: an operand of shape ", t.shape(), " broadcast over the batch ", batch,
            " is not supported on cuda yet");
  return o;
}

// The view of t [..., R, C] as [..., C, R], without copying.
Tensor swap_last(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return t.as_strided(shape, strides, t.offset());
}

// a [..., M, K] times b [..., K, N], batch dims broadcast, fp32 (GemmAlgo::Tiled): outside the graph.
Tensor product(Tensor a, Tensor b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  const Shape batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                       Shape(b.shape().begin(), b.shape().end() - 2), "matmul");
  Shape shape = batch;
  shape.insert(shape.end(), {M, N});
  Tensor out = device_empty(shape);
  if (out.numel() == 0) return out;
  const Operand oa = operand(a, batch), ob = operand(b, batch);
  int64_t items = shape_numel(batch), rows = M;
  // One B for all items whose A rows follow each other (a Linear layer over [batch, tokens, features]): a
  // single product of items * M rows.
  if (items > 1 && ob.stride == 0 && !oa.trans && oa.stride == M * oa.ld) {
    rows = items * M;
    items = 1;
  }
  cuda::gemm(oa.trans, ob.trans, rows, N, K, 1.f, oa.p, oa.ld, oa.stride, ob.p, ob.ld, ob.stride, 0.f, ptr(out), N,
             M * N, items, cuda::GemmAlgo::Tiled);
  return out;
}

// t viewed as [rows, t.size(-1)] (gathered first when its strides do not allow it).
Tensor as_rows(const Tensor& t) {
  const Tensor c = dense(t);
  return c.as_strided({c.numel() / std::max<int64_t>(c.size(-1), 1), c.size(-1)}, {c.size(-1), 1}, c.offset());
}

// A gradient computed over the broadcast batch, summed back to the operand's shape.
Tensor batch_sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const bool trailing = shape.size() <= g.shape().size() &&
                        std::equal(shape.begin(), shape.end(), g.shape().end() - int64_t(shape.size()));
  ENG_CHECK(trailing, "matmul: the gradient of an operand of shape ", shape, " broadcast to ", g.shape(),
            " is not supported on cuda yet");
  return sum_rows_to(dense(g), shape);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_f32(a, "matmul", "a");
  check_f32(b, "matmul", "b");
  Tensor out = product(a.detach(), b.detach());
  return record(out, "matmul", {a, b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
    const Tensor ga = batch_sum_to(product(g, swap_last(b)), a.shape());
    // A weight shared by every item: one product over all rows, K = items * M, instead of a sum of items.
    const Tensor gb = b.dim() == 2 ? product(swap_last(as_rows(a)), as_rows(g))
                                   : batch_sum_to(product(swap_last(a), g), b.shape());
    return std::vector<Tensor>{ga, gb};
  });
}

Tensor softmax(const Tensor& x, int64_t axis, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_f32(x, op, "x");
  ENG_CHECK(wrap_axis(axis, x.dim(), op) == x.dim() - 1, op, ": over axis ", axis, " of shape ", x.shape(),
            "; on cuda only the last axis is supported yet");
  const int64_t C = x.size(-1), rows = C > 0 ? x.numel() / C : 0;
  Tensor y = device_empty(x.shape());
  if (x.numel() > 0) cuda::softmax_rows(ptr(dense(x)), ptr(y), rows, C, log);
  return record(y, op, {x}, [y = y.detach(), rows, C, log](const Tensor& g) {
    Tensor dx = device_empty(y.shape());
    if (y.numel() > 0) cuda::softmax_rows_backward(ptr(y), ptr(dense(g)), ptr(dx), rows, C, log);
    return std::vector<Tensor>{dx};
  });
}

Tensor norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool center, const char* op) {
  check_f32(x, op, "x");
  if (weight.defined()) check_f32(weight, op, "weight");
  if (bias.defined()) check_f32(bias, op, "bias");
  const int64_t C = x.size(-1), N = C > 0 ? x.numel() / C : 0;
  const Tensor xc = dense(x), w = weight.defined() ? dense(weight) : Tensor();
  const Tensor b = bias.defined() ? dense(bias) : Tensor();
  Tensor y = device_empty(x.shape());
  Tensor mean = center ? device_empty({N}) : Tensor(), rstd = device_empty({N});
  auto opt = [](const Tensor& t) { return t.defined() ? ptr(t) : nullptr; };
  if (x.numel() > 0)
    cuda::layer_norm_rows(ptr(xc), opt(w), opt(b), ptr(y), opt(mean), ptr(rstd), N, C, float(eps), !center);
  std::vector<Tensor> inputs{x, weight};
  if (center) inputs.push_back(bias);
  return record(y, op, inputs, [xc, w, has_bias = bias.defined(), mean, rstd, N, C, center, opt](const Tensor& g) {
    Tensor dx = device_empty(xc.shape());
    Tensor dw = w.defined() ? device_empty({C}) : Tensor(), db = has_bias ? device_empty({C}) : Tensor();
    cuda::layer_norm_rows_backward(ptr(dense(g)), ptr(xc), opt(w), opt(mean), ptr(rstd), ptr(dx), opt(dw), opt(db), N,
                                   C, !center);
    std::vector<Tensor> grads{dx, dw};
    if (center) grads.push_back(db);
    return grads;
  });
}

AddNormResult add_norm(const Tensor& x, const Tensor& h, const Tensor& weight, const Tensor& bias, double eps,
                       bool center, const char* op) {
  const Tensor s = add(x, h);
  return {s, norm(s, weight, bias, eps, center, op)};
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_f32(weight, "embedding", "weight");
  const int64_t V = weight.size(0), D = weight.size(1), N = ids.numel();
  // The ids are checked on the host (the kernels skip bad ids instead of failing).
  const Tensor host_ids = to_device(ids, Device::CPU).contiguous();
  const int64_t* p = host_ids.data<int64_t>();
  for (int64_t i = 0; i < N; ++i)
    ENG_CHECK(p[i] >= 0 && p[i] < V, "embedding: index ", p[i], " out of range for weight of shape ", weight.shape());
  const Tensor dev_ids = to_device(host_ids, Device::CUDA);
  Shape shape = ids.shape();
  shape.push_back(D);
  Tensor out = device_empty(shape);
  if (out.numel() > 0) cuda::embedding_gather(ptr(dense(weight)), dev_ids.device_data<int64_t>(), ptr(out), N, V, D);
  return record(out, "embedding", {weight, ids}, [V, D, N, dev_ids](const Tensor& g) {
    Tensor gw = zeros_on({V, D}, DType::F32, Device::CUDA);
    if (N * D > 0) cuda::embedding_scatter_add(ptr(dense(g)), dev_ids.device_data<int64_t>(), ptr(gw), N, V, D);
    return std::vector<Tensor>{gw, Tensor()};
  });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double label_smoothing) {
  check_f32(logits, "cross_entropy", "logits");
  ENG_CHECK(label_smoothing == 0, "cross_entropy: label smoothing (", label_smoothing,
            ") is not supported on cuda yet");
  const int64_t C = logits.size(-1), N = targets.numel();
  const Tensor host_targets = to_device(targets, Device::CPU).contiguous();
  const int64_t* t = host_targets.data<int64_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < N; ++r) {
    if (t[r] == ignore_index) continue;
    ENG_CHECK(t[r] >= 0 && t[r] < C, "cross_entropy: target ", t[r], " out of range [0, ", C, ") for logits of shape ",
              logits.shape(), " (ignore_index is ", ignore_index, ")");
    ++count;
  }
  const Tensor x = dense(logits), dev_targets = to_device(host_targets, Device::CUDA);
  Tensor loss = device_empty({N}), lse = device_empty({N}), total = zeros_on({}, DType::F32, Device::CUDA);
  if (N > 0 && C > 0) {
    cuda::cross_entropy_rows(ptr(x), dev_targets.device_data<int64_t>(), ptr(loss), ptr(lse), N, C, ignore_index);
    cuda::sum_rows(ptr(loss), ptr(total), N, 1);
  }
  const double scale = count > 0 ? 1.0 / double(count) : 0.0;
  Tensor out = binary_kernel(cuda::BinaryKind::Mul, total, device_scalar(scale));
  return record(out, "cross_entropy", {logits, targets}, [x, dev_targets, lse, scale, N, C,
                                                          ignore_index](const Tensor& g) {
    // dloss of every row: g / count, from g on the device (no copy of it to the host)
    const Tensor dloss = binary_kernel(cuda::BinaryKind::Mul, to_device(full({N}, scale), Device::CUDA), dense(g));
    Tensor dx = device_empty(x.shape());
    if (N > 0 && C > 0)
      cuda::cross_entropy_rows_backward(ptr(x), dev_targets.device_data<int64_t>(), ptr(lse), ptr(dloss), ptr(dx), N, C,
                                        ignore_index);
    return std::vector<Tensor>{dx, Tensor()};
  });
}

Tensor sum(const Tensor& a, const Shape& axes, bool keepdim) {
  check_f32(a, "sum", "a");
  std::vector<int64_t> ax;
  for (int64_t d : axes) ax.push_back(wrap_axis(d, a.dim(), "sum"));
  if (axes.empty())
    for (int64_t d = 0; d < a.dim(); ++d) ax.push_back(d);
  std::sort(ax.begin(), ax.end());
  for (size_t i = 0; i < ax.size(); ++i)
    ENG_CHECK(ax[i] == int64_t(i), "sum: over axes ", axes, " of shape ", a.shape(),
              "; on cuda only leading axes are supported yet");
  const Shape kept(a.shape().begin() + int64_t(ax.size()), a.shape().end());
  Shape shape = kept;
  if (keepdim) shape.insert(shape.begin(), ax.size(), 1);
  Tensor out = device_empty(shape);
  const int64_t cols = shape_numel(kept);
  if (cols > 0) cuda::sum_rows(ptr(dense(a)), ptr(out), a.numel() / cols, cols);
  return record(out, "sum", {a}, [in = a.shape()](const Tensor& g) {
    // g repeated over the summed leading axes: zeros + g as a periodic operand
    return std::vector<Tensor>{binary_kernel(cuda::BinaryKind::Add, zeros_on(in, DType::F32, Device::CUDA), dense(g))};
  });
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  Shape trailing = shape;
  while (!trailing.empty() && trailing.front() == 1) trailing.erase(trailing.begin());
  const bool ok = trailing.size() <= a.shape().size() &&
                  std::equal(trailing.begin(), trailing.end(), a.shape().end() - int64_t(trailing.size()));
  ENG_CHECK(ok, "sum_to: reducing shape ", a.shape(), " to ", shape, " is not supported on cuda yet");
  Shape lead;
  for (int64_t d = 0; d < a.dim() - int64_t(trailing.size()); ++d) lead.push_back(d);
  return reshape(lead.empty() ? a : sum(a, lead, false), shape);
}

}  // namespace eng::cuda_op
