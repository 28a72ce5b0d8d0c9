#include "ops/loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "engine/vec_kernels.h"
#include "ops/binary.h"
#include "ops/cuda/dispatch.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_OP("cross_entropy");
ENG_REGISTER_OP("linear_cross_entropy");

namespace {

// What the rows of one cross-entropy call share: q_j = on * [j == target] + uniform is the target
// distribution (on = 1 - eps, uniform = eps / C).
struct CrossEntropyRows {
  int64_t N, C, ignore_index;
  double on, uniform;
  const int64_t* target;
  int64_t grain() const { return std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1)); }
};

// Per row: lse = log sum_j exp(x_j) (shifted by the row max for stability), and the loss
// -sum_j q_j log p_j = lse - sum_j q_j x_j (as sum_j q_j = 1). Ignored rows keep loss 0.
template <class T>
void cross_entropy_forward(const CrossEntropyRows& p, const T* x, double* lse, double* loss) {
  parallel_for(0, p.N, p.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t t = p.target[r];
      if (t == p.ignore_index) continue;
      const T* row = x + r * p.C;
      double mx = double(row[0]), sum = 0, total = 0;
      for (int64_t j = 1; j < p.C; ++j) mx = std::max(mx, double(row[j]));
      for (int64_t j = 0; j < p.C; ++j) {
        sum += std::exp(double(row[j]) - mx);
        total += double(row[j]);
      }
      lse[r] = mx + std::log(sum);
      loss[r] = lse[r] - p.on * double(row[t]) - p.uniform * total;
    }
  });
}

// dx_j = (softmax_j - q_j) * scale for kept rows, 0 for ignored ones (gx starts zeroed).
template <class T>
void cross_entropy_backward(const CrossEntropyRows& p, const T* x, const double* lse, double scale, T* gx) {
  parallel_for(0, p.N, p.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t t = p.target[r];
      if (t == p.ignore_index) continue;
      const T* row = x + r * p.C;
      T* grow = gx + r * p.C;
      for (int64_t j = 0; j < p.C; ++j) grow[j] = T((std::exp(double(row[j]) - lse[r]) - p.uniform) * scale);
      grow[t] -= T(p.on * scale);
    }
  });
}

// f32: the same rows through the SIMD kernels (engine/vec_kernels.h); these overloads win over the
// templates above for float.
void cross_entropy_forward(const CrossEntropyRows& p, const float* x, double* lse, double* loss) {
  const auto row = vec_kernels().cross_entropy_row;
  parallel_for(0, p.N, p.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      if (p.target[r] == p.ignore_index) continue;
      float l = 0;
      loss[r] = row(x + r * p.C, p.C, p.target[r], float(p.on), float(p.uniform), &l);
      lse[r] = l;
    }
  });
}
void cross_entropy_backward(const CrossEntropyRows& p, const float* x, const double* lse, double scale, float* gx) {
  const auto row = vec_kernels().cross_entropy_backward_row;
  parallel_for(0, p.N, p.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      if (p.target[r] != p.ignore_index)
        row(x + r * p.C, p.C, p.target[r], float(lse[r]), float(p.on), float(p.uniform), float(scale), gx + r * p.C);
  });
}

CrossEntropyRows rows_at(const CrossEntropyRows& p, int64_t r0, int64_t n) {
  CrossEntropyRows r = p;
  r.N = n;
  r.target = p.target + r0;
  return r;
}

// The forward and, where gx is given, the gradient for an incoming gradient of 1 (scale = 1 / count; ignored rows
// 0), a few rows at a time while they are in cache: the backward then reads nothing when its gradient is 1, as for
// a training loss, and scales gx once otherwise. Separately they moved [N, C] four times (read, zero, read, write),
// now twice. Inside the parallel loop the row functions run serially.
template <class T>
void cross_entropy_fused(const CrossEntropyRows& p, const T* x, double* lse, double* loss, T* gx, double scale) {
  const int64_t C = p.C, chunk = std::max<int64_t>(1, 8192 / std::max<int64_t>(C, 1));
  parallel_for(0, p.N, p.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t r0 = lo; r0 < hi; r0 += chunk) {
      const int64_t n = std::min(chunk, hi - r0);
      const CrossEntropyRows rows = rows_at(p, r0, n);
      cross_entropy_forward(rows, x + r0 * C, lse + r0, loss + r0);
      if (!gx) continue;
      for (int64_t r = r0; r < r0 + n; ++r)
        if (p.target[r] == p.ignore_index) std::fill(gx + r * C, gx + (r + 1) * C, T(0));
      cross_entropy_backward(rows, x + r0 * C, lse + r0, scale, gx + r0 * C);
    }
  });
}

// f32 (overloading the template above): per row, the SIMD kernels take the max and exp(x - max) with its sum, the
// exponentials written straight into the gradient's row (or a scratch row) and scaled there in cache, so each logit
// is read from memory once and exponentiated once. The row kernels, forward then backward, took two exponentials per
// logit.
void cross_entropy_fused(const CrossEntropyRows& p, const float* x, double* lse, double* loss, float* gx,
                         double scale) {
  const VecKernels& k = vec_kernels();
  const int64_t C = p.C;
  const float b = float(p.uniform * scale), on_scale = float(p.on * scale);
  parallel_for(0, p.N, p.grain(), [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(gx ? 0 : static_cast<size_t>(C));
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t t = p.target[r];
      if (t == p.ignore_index) {
        if (gx) std::fill(gx + r * C, gx + (r + 1) * C, 0.f);
        continue;
      }
      const float* row = x + r * C;
      float mx, s;
      if (gx) {
        s = k.cross_entropy_grad_row(row, C, t, scale, b, on_scale, gx + r * C, &mx);
      } else {
        mx = k.max(row, C);
        s = k.exp_sub_sum(row, mx, scratch.data(), C);
      }
      const double l = double(mx) + std::log(double(s));
      lse[r] = l;
      loss[r] = l - p.on * double(row[t]) - (p.uniform != 0 ? p.uniform * double(k.sum(row, C)) : 0.0);
    }
  });
}

// The number of rows whose target is not ignore_index; every other target must be a class id in [0, C).
int64_t count_targets(const Tensor& targets, int64_t C, int64_t ignore_index, const char* op, const Shape& logits) {
  const int64_t* t = targets.data<int64_t>();
  int64_t count = 0;
  for (int64_t r = 0, N = targets.numel(); r < N; ++r) {
    if (t[r] == ignore_index) continue;
    ENG_CHECK(t[r] >= 0 && t[r] < C, op, ": target ", t[r], " out of range [0, ", C, ") for logits of shape ", logits,
              " (ignore_index is ", ignore_index, ")");
    ++count;
  }
  return count;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double label_smoothing) {
  ENG_CHECK(logits.defined() && targets.defined(), "cross_entropy: undefined tensor argument");
  ENG_CHECK(is_floating(logits.dtype()), "cross_entropy: logits must be f32 or f64, got ", logits.dtype(), " ",
            logits.shape());
  ENG_CHECK(logits.dim() >= 1, "cross_entropy: logits of shape ", logits.shape(), " need a class axis");
  ENG_CHECK(targets.dtype() == DType::I64, "cross_entropy: targets must be i64, got ", targets.dtype(), " ",
            targets.shape());
  const Shape rows_shape(logits.shape().begin(), logits.shape().end() - 1);
  ENG_CHECK(targets.shape() == rows_shape, "cross_entropy: targets of shape ", targets.shape(),
            " do not match logits of shape ", logits.shape(), " without its class axis");
  ENG_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got ",
            label_smoothing);
  if (on_cuda(logits)) return cuda_op::cross_entropy(logits, targets, ignore_index, label_smoothing);
  const int64_t C = logits.shape().back(), N = targets.numel();
  Tensor tc = targets.contiguous();
  const int64_t count = count_targets(tc, C, ignore_index, "cross_entropy", logits.shape());
  const CrossEntropyRows rows{N, C, ignore_index, 1 - label_smoothing, C > 0 ? label_smoothing / double(C) : 0.0,
                              tc.data<int64_t>()};

  Tensor lc = logits.contiguous();
  // Both from the caching allocator: a fresh vector would fault in its pages on every call.
  const Tensor lse = empty({N}, DType::F64), loss = zeros({N}, DType::F64);
  const Tensor gx = needs_grad({lc}) ? empty(lc.shape(), lc.dtype()) : Tensor();
  const double unit = count > 0 ? 1.0 / double(count) : 0.0;
  ENG_DISPATCH(logits.dtype(), T,
               cross_entropy_fused(rows, lc.data<T>(), lse.data<double>(), loss.data<double>(),
                                   gx.defined() ? gx.data<T>() : nullptr, unit));
  double total = 0;  // summed serially, so the result does not depend on the thread count
  for (int64_t r = 0; r < N; ++r) total += loss.data<double>()[r];
  Tensor out = scalar_tensor(count > 0 ? total / double(count) : 0.0, logits.dtype());
  return record(out, "cross_entropy", {lc, targets}, [gx](const Tensor& g) {
    const double s = g.item();
    return std::vector<Tensor>{s == 1 ? gx : mul_scalar(gx, s), Tensor()};
  });
}

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& targets,
                            int64_t chunk, int64_t ignore_index, double label_smoothing) {
  ENG_CHECK(x.defined() && weight.defined() && targets.defined(), "linear_cross_entropy: undefined tensor argument");
  ENG_CHECK(is_floating(x.dtype()) && weight.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
            "linear_cross_entropy: x, weight and bias must share one floating dtype, got ", x.dtype(), ", ",
            weight.dtype(), bias.defined() ? ", " : "", bias.defined() ? dtype_name(bias.dtype()) : "");
  ENG_CHECK(x.dim() >= 1 && weight.dim() == 2 && weight.size(1) == x.shape().back(),
            "linear_cross_entropy: x ", x.shape(), " and weight ", weight.shape(), " do not fit (weight is [C, d])");
  const int64_t C = weight.size(0), d = weight.size(1);
  ENG_CHECK(!bias.defined() || bias.shape() == Shape{C}, "linear_cross_entropy: bias ", bias.shape(),
            " does not match weight ", weight.shape());
  const Shape rows_shape(x.shape().begin(), x.shape().end() - 1);
  ENG_CHECK(targets.dtype() == DType::I64 && targets.shape() == rows_shape, "linear_cross_entropy: targets ",
            dtype_name(targets.dtype()), " ", targets.shape(), " must be i64 of shape ", Shape(rows_shape));
  ENG_CHECK(chunk >= 1, "linear_cross_entropy: chunk must be >= 1, got ", chunk);
  ENG_CHECK(label_smoothing >= 0 && label_smoothing <= 1,
            "linear_cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  const int64_t N = targets.numel();
  const Shape logits_shape{N, C};
  Tensor tc = targets.contiguous();
  const int64_t count = count_targets(tc, C, ignore_index, "linear_cross_entropy", logits_shape);
  const CrossEntropyRows all{N, C, ignore_index, 1 - label_smoothing, C > 0 ? label_smoothing / double(C) : 0.0,
                             tc.data<int64_t>()};
  const Tensor x2 = reshape(x.detach(), {N, d}), w = weight.detach(), b = bias.defined() ? bias.detach() : Tensor();
  // Logits of rows [r0, r0 + n), contiguous; the chunk's rows of `all` start at its target pointer offset.
  auto logits_of = [=](int64_t r0, int64_t n) {
    NoGradGuard no_grad;
    Tensor z = matmul(narrow(x2, 0, r0, n), transpose(w, 0, 1));
    return (b.defined() ? add(z, b) : z).contiguous();
  };
  auto rows_of = [all](int64_t r0, int64_t n) {
    CrossEntropyRows r = all;
    r.N = n;
    r.target = all.target + r0;
    return r;
  };
  Tensor lse = empty({N}, DType::F64);
  std::vector<double> loss(size_t(N), 0.0);
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t n = std::min(chunk, N - r0);
    const Tensor z = logits_of(r0, n);
    ENG_DISPATCH(x.dtype(), T, cross_entropy_forward(rows_of(r0, n), z.data<T>(), lse.data<double>() + r0,
                                                     loss.data() + r0));
  }
  double total = 0;
  for (double v : loss) total += v;
  Tensor out = scalar_tensor(count > 0 ? total / double(count) : 0.0, x.dtype());
  return record(out, "linear_cross_entropy", {x, weight, bias, targets},
                [=, xs = x.shape()](const Tensor& g) {
                  const double scale = count > 0 ? g.item() / double(count) : 0.0;
                  Tensor gx = empty({N, d}, x2.dtype()), gw = zeros({C, d}, x2.dtype()), gb = zeros({C}, x2.dtype());
                  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
                    const int64_t n = std::min(chunk, N - r0);
                    const Tensor z = logits_of(r0, n);
                    Tensor gz = zeros({n, C}, z.dtype());
                    ENG_DISPATCH(z.dtype(), T, cross_entropy_backward(rows_of(r0, n), z.data<T>(),
                                                                      lse.data<double>() + r0, scale, gz.data<T>()));
                    narrow(gx, 0, r0, n).copy_from(matmul(gz, w));
                    gw = add(gw, matmul(transpose(gz, 0, 1), narrow(x2, 0, r0, n)));
                    gb = add(gb, sum(gz, {0}));
                  }
                  return std::vector<Tensor>{reshape(gx, xs), gw, b.defined() ? gb : Tensor(), Tensor()};
                });
}

}  // namespace eng
