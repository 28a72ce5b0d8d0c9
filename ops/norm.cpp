#include "ops/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "engine/vec_kernels.h"
#include "ops/binary.h"
#include "ops/cuda/dispatch.h"
#include "ops/kernel_util.h"

namespace eng {

ENG_REGISTER_OP("layer_norm");
ENG_REGISTER_OP("rms_norm");

// layer_norm and rms_norm share their kernels: rms_norm is layer_norm without centring and without
// bias, so a null `mean` pointer below means "do not centre" (the row mean is taken as 0).
namespace {

// f64 (f32 runs the SIMD rows below). Per row r of x [N, C]: mu = mean(x) (or 0),
// rstd = 1 / sqrt(mean((x - mu)^2) + eps), y = (x - mu) * rstd * w + b, statistics saved for the backward.
template <class T>
void norm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t N, int64_t C, double eps) {
  parallel_for(0, N, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* px = x + r * C;
      T* py = y + r * C;
      double mu = 0;
      if (mean) {
        for (int64_t c = 0; c < C; ++c) mu += double(px[c]);
        mu /= double(C);
      }
      double var = 0;
      for (int64_t c = 0; c < C; ++c) var += (double(px[c]) - mu) * (double(px[c]) - mu);
      const double rs = 1.0 / std::sqrt(var / double(C) + eps);
      for (int64_t c = 0; c < C; ++c) {
        T v = T((double(px[c]) - mu) * rs);
        if (w) v *= w[c];
        if (b) v += b[c];
        py[c] = v;
      }
      if (mean) mean[r] = T(mu);
      rstd[r] = T(rs);
    }
  });
}

// With xhat = (x - mu) * rstd and dn = g * w:
//   dx = rstd * (dn - mean(dn) - xhat * mean(dn * xhat))   (the mean(dn) term only when centring)
//   dw = sum over rows of g * xhat,  db = sum over rows of g.
// dx runs in parallel over rows; dw and db in parallel over columns, each summing its rows in order,
// so the result does not depend on the thread count.
template <class T>
void norm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* g, T* dx, T* dw, T* db, int64_t N,
                   int64_t C) {
  auto xhat = [&](int64_t r, int64_t c) { return (x[r * C + c] - (mean ? mean[r] : T(0))) * rstd[r]; };
  parallel_for(0, N, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* pg = g + r * C;
      double dn_mean = 0, dn_xhat_mean = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double dn = double(pg[c]) * (w ? double(w[c]) : 1.0);
        dn_mean += dn;
        dn_xhat_mean += dn * double(xhat(r, c));
      }
      dn_mean = mean ? dn_mean / double(C) : 0.0;
      dn_xhat_mean /= double(C);
      for (int64_t c = 0; c < C; ++c) {
        const double dn = double(pg[c]) * (w ? double(w[c]) : 1.0);
        dx[r * C + c] = T(double(rstd[r]) * (dn - dn_mean - double(xhat(r, c)) * dn_xhat_mean));
      }
    }
  });
  if (!dw && !db) return;
  parallel_for(0, C, std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1)), [&](int64_t lo, int64_t hi) {
    std::vector<double> sw(size_t(hi - lo), 0.0), sb(size_t(hi - lo), 0.0);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = lo; c < hi; ++c) {
        sw[size_t(c - lo)] += double(g[r * C + c]) * double(xhat(r, c));
        sb[size_t(c - lo)] += double(g[r * C + c]);
      }
    for (int64_t c = lo; c < hi; ++c) {
      if (dw) dw[c] = T(sw[size_t(c - lo)]);
      if (db) db[c] = T(sb[size_t(c - lo)]);
    }
  });
}

// f32: the SIMD row kernels (engine/vec_kernels.h), statistics accumulated in float lanes.
void norm_forward_f32(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd, int64_t N,
                      int64_t C, double eps) {
  const auto row = vec_kernels().norm_row;
  parallel_for(0, N, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) row(x + r * C, w, b, y + r * C, C, float(eps), mean ? mean + r : nullptr, rstd + r);
  });
}

// One pass over the rows: each block of 64 rows (fixed, whatever the thread count) writes its dx rows and
// adds g xhat and g into its own float partials of dw and db while the rows are in cache; the partials
// are then added block by block, in order, in double. The same bits for any thread count. The partials come
// from the caching allocator: a fresh 2 MiB vector per call faulted in its pages each time (512 first
// touches, as long as the whole pass at [16384, 1024]).
void norm_backward_f32(const float* x, const float* w, const float* mean, const float* rstd, const float* g,
                       float* dx, float* dw, float* db, int64_t N, int64_t C) {
  constexpr int64_t kRows = 64;
  const VecKernels& k = vec_kernels();
  const int64_t blocks = (N + kRows - 1) / kRows;
  const bool params = dw || db;
  const Tensor partials = params ? empty({db ? 2 : 1, blocks, C}) : Tensor();
  float* pw = params ? partials.data<float>() : nullptr;
  float* pb = db ? pw + blocks * C : nullptr;
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      if (params) std::fill(pw + blk * C, pw + (blk + 1) * C, 0.f);
      if (pb) std::fill(pb + blk * C, pb + (blk + 1) * C, 0.f);
      for (int64_t r = blk * kRows; r < std::min(N, (blk + 1) * kRows); ++r)
        k.norm_backward_row(x + r * C, w, mean ? mean + r : nullptr, rstd[r], g + r * C, dx + r * C,
                            params ? pw + blk * C : nullptr, pb ? pb + blk * C : nullptr, C);
    }
  });
  if (!params) return;
  // Blocks outermost, so that the partials are read in rows (column by column, each cache line of them was
  // loaded 16 times); each column still sums its blocks in order.
  parallel_for(0, C, 256, [&](int64_t lo, int64_t hi) {
    std::vector<double> sw(size_t(hi - lo), 0.0), sb(pb ? size_t(hi - lo) : 0, 0.0);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      for (int64_t c = lo; c < hi; ++c) sw[size_t(c - lo)] += pw[blk * C + c];
      if (pb)
        for (int64_t c = lo; c < hi; ++c) sb[size_t(c - lo)] += pb[blk * C + c];
    }
    for (int64_t c = lo; c < hi; ++c) {
      if (dw) dw[c] = float(sw[size_t(c - lo)]);
      if (db) db[c] = float(sb[size_t(c - lo)]);
    }
  });
}

void check_param(const Tensor& x, const Tensor& p, const char* what, const char* op) {
  if (!p.defined()) return;
  ENG_CHECK(p.dim() == 1 && p.shape()[0] == x.shape().back(), op, ": ", what, " of shape ", p.shape(),
            " does not match the last dim of input shape ", x.shape());
  check_same_dtype(x, p, op);
}

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Records y = norm(x) given the forward's results: xc (x made contiguous), the saved statistics, and
// weight/bias as the op saw them.
Tensor norm_record(const Tensor& x, const Tensor& xc, const Tensor& weight, const Tensor& bias, const Tensor& out,
                   const Tensor& mean, const Tensor& rstd, bool center, const char* op) {
  const int64_t C = xc.shape().back(), N = C > 0 ? xc.numel() / C : 0;
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  std::vector<Tensor> inputs{x, weight};
  if (center) inputs.push_back(bias);
  return record(out, op, inputs, [xc, w, has_bias = bias.defined(), mean, rstd, N, C, center](const Tensor& grad) {
    Tensor g = grad.contiguous();
    Tensor dx = empty(xc.shape(), xc.dtype());
    Tensor dw = w.defined() ? empty({C}, xc.dtype()) : Tensor();
    Tensor db = has_bias ? empty({C}, xc.dtype()) : Tensor();
    if (xc.dtype() == DType::F32)
      norm_backward_f32(xc.data<float>(), data_or_null<float>(w), data_or_null<float>(mean), rstd.data<float>(),
                        g.data<float>(), dx.data<float>(), data_or_null<float>(dw), data_or_null<float>(db), N, C);
    else
      norm_backward<double>(xc.data<double>(), data_or_null<double>(w), data_or_null<double>(mean),
                            rstd.data<double>(), g.data<double>(), dx.data<double>(), data_or_null<double>(dw),
                            data_or_null<double>(db), N, C);
    std::vector<Tensor> grads{dx, dw};
    if (center) grads.push_back(db);
    return grads;
  });
}

void check_norm_args(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* op) {
  ENG_CHECK(x.dim() >= 1, op, ": input must have at least 1 dim, got shape ", x.shape());
  if (!is_floating(x.dtype())) fail_not_floating(op);
  check_param(x, weight, "weight", op);
  check_param(x, bias, "bias", op);
}

// layer_norm when `center`, else rms_norm (then `bias` is undefined).
Tensor norm_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool center, const char* op) {
  check_norm_args(x, weight, bias, op);
  if (on_cuda(x)) return cuda_op::norm(x, weight, bias, eps, center, op);
  const int64_t C = x.shape().back();
  const int64_t N = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Tensor xc = x.detach().contiguous();
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = empty(x.shape(), x.dtype());
  Tensor mean = center ? empty({N}, x.dtype()) : Tensor();
  Tensor rstd = empty({N}, x.dtype());
  if (x.dtype() == DType::F32)
    norm_forward_f32(xc.data<float>(), data_or_null<float>(w), data_or_null<float>(b), out.data<float>(),
                     data_or_null<float>(mean), rstd.data<float>(), N, C, eps);
  else
    norm_forward<double>(xc.data<double>(), data_or_null<double>(w), data_or_null<double>(b), out.data<double>(),
                         data_or_null<double>(mean), rstd.data<double>(), N, C, eps);
  return norm_record(x, xc, weight, bias, out, mean, rstd, center, op);
}

// s = x + h and y = norm(s): in f32 each row is added and normalised while it is in cache (one pass over
// memory instead of two); s is recorded as the op "add" and y as the norm of s, so the backward is theirs.
AddNormResult add_norm_impl(const Tensor& x, const Tensor& h, const Tensor& weight, const Tensor& bias, double eps,
                            bool center, const char* op) {
  ENG_CHECK(x.shape() == h.shape(), op, ": x of shape ", x.shape(), " and h of shape ", h.shape(), " differ");
  check_same_dtype(x, h, op);
  check_norm_args(x, weight, bias, op);
  if (on_cuda(x)) return cuda_op::add_norm(x, h, weight, bias, eps, center, op);
  if (x.dtype() != DType::F32) {
    Tensor s = add(x, h);
    return {s, norm_impl(s, weight, bias, eps, center, op)};
  }
  const int64_t C = x.shape().back(), N = C > 0 ? x.numel() / C : 0;
  const Tensor xc = x.detach().contiguous(), hc = h.detach().contiguous();
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor sum = empty(x.shape(), x.dtype()), out = empty(x.shape(), x.dtype());
  Tensor mean = center ? empty({N}, x.dtype()) : Tensor();
  Tensor rstd = empty({N}, x.dtype());
  const VecKernels& k = vec_kernels();
  const float *px = xc.data<float>(), *ph = hc.data<float>(), *pw = data_or_null<float>(w),
              *pb = data_or_null<float>(b);
  float *ps = sum.data<float>(), *py = out.data<float>(), *pm = data_or_null<float>(mean), *pr = rstd.data<float>();
  parallel_for(0, N, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      k.add(px + r * C, ph + r * C, ps + r * C, C);
      k.norm_row(ps + r * C, pw, pb, py + r * C, C, float(eps), pm ? pm + r : nullptr, pr + r);
    }
  });
  Tensor s = record(sum, "add", {x, h}, [](const Tensor& g) { return std::vector<Tensor>{g, g}; });
  return {s, norm_record(s, sum, weight, bias, out, mean, rstd, center, op)};
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return norm_impl(x, weight, bias, eps, true, "layer_norm");
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return norm_impl(x, weight, Tensor(), eps, false, "rms_norm");
}

AddNormResult add_layer_norm(const Tensor& x, const Tensor& h, const Tensor& weight, const Tensor& bias, double eps) {
  return add_norm_impl(x, h, weight, bias, eps, true, "layer_norm");
}

AddNormResult add_rms_norm(const Tensor& x, const Tensor& h, const Tensor& weight, double eps) {
  return add_norm_impl(x, h, weight, Tensor(), eps, false, "rms_norm");
}

}  // namespace eng
