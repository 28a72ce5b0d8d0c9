#include "ops/cumsum.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/strided.h"
#include "engine/threadpool.h"
#include "ops/kernel_util.h"

namespace eng {

ENG_REGISTER_OP("cumsum");
ENG_REGISTER_OP("logcumsumexp");

namespace {

// Calls scan(line) for every line of `a` along `axis`, where line holds the input and output bases and steps
// (the output is the contiguous tensor of a's shape). Lines are independent, so they are spread over the pool.
struct Line {
  int64_t in, out, in_step, out_step, n;
};

template <class F>
void for_each_line(const Tensor& a, int64_t axis, F scan) {
  const bool scalar = a.dim() == 0;
  Shape lines = a.shape();
  if (!scalar) lines[size_t(axis)] = 1;
  const Shape out_strides = contiguous_strides(a.shape());
  std::vector<int64_t> in_base, out_base;
  for_each_offset<2>(lines, {a.strides().data(), out_strides.data()}, {a.offset(), 0}, [&](auto o) {
    in_base.push_back(o[0]);
    out_base.push_back(o[1]);
  });
  const int64_t n = scalar ? 1 : a.shape()[size_t(axis)];
  const int64_t in_step = scalar ? 0 : a.strides()[size_t(axis)];
  const int64_t out_step = scalar ? 0 : out_strides[size_t(axis)];
  parallel_for(0, int64_t(in_base.size()), std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t l = lo; l < hi; ++l) scan(Line{in_base[size_t(l)], out_base[size_t(l)], in_step, out_step, n});
               });
}

int64_t scan_axis(const Tensor& a, int64_t axis, const char* op) {
  if (a.dim() > 0) return wrap_axis(axis, a.dim(), op);
  ENG_CHECK(axis == 0 || axis == -1, op, ": axis ", axis, " out of range for a 0-D tensor");
  return 0;
}

// Each line accumulates in double so that long f32 scans do not drift.
template <class T>
void cumsum_kernel(const Tensor& a, int64_t axis, bool reverse, T* out) {
  const T* x = static_cast<const T*>(a.storage()->data);
  for_each_line(a, axis, [&](const Line& l) {
    double acc = 0;
    for (int64_t k = 0; k < l.n; ++k) {
      const int64_t i = reverse ? l.n - 1 - k : k;
      acc += double(x[l.in + i * l.in_step]);
      out[l.out + i * l.out_step] = T(acc);
    }
  });
}

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// L_i = log(exp(L_{i−1}) + exp(x_i)) = max + log1p(exp(−|L_{i−1} − x_i|)), in double.
template <class T>
void logcumsumexp_kernel(const Tensor& a, int64_t axis, T* out) {
  const T* x = static_cast<const T*>(a.storage()->data);
  for_each_line(a, axis, [&](const Line& l) {
    double acc = kNegInf;
    for (int64_t i = 0; i < l.n; ++i) {
      const double v = double(x[l.in + i * l.in_step]);
      if (std::isnan(v) || std::isnan(acc))
        acc = std::numeric_limits<double>::quiet_NaN();
      else if (std::isinf(v) || std::isinf(acc))  // −inf leaves the other side; +inf wins
        acc = std::max(acc, v);
      else
        acc = std::max(acc, v) + std::log1p(std::exp(-std::fabs(acc - v)));
      out[l.out + i * l.out_step] = T(acc);
    }
  });
}

// ∂L/∂x_j = Σ_{i>=j} g_i exp(x_j − L_i) = exp(x_j − L_j) · R_j with R_j = Σ_{i>=j} g_i exp(L_j − L_i), and
// R_j = g_j + exp(L_j − L_{j+1}) R_{j+1}. L never decreases, so every exponent is <= 0: nothing overflows. A −inf
// L_j (nothing before it) means x_j = −inf: its gradient is 0 and it passes nothing back.
template <class T>
void logcumsumexp_backward_kernel(const Tensor& x, const T* lse, const T* g, T* gx, int64_t axis) {
  const T* xs = static_cast<const T*>(x.storage()->data);
  for_each_line(x, axis, [&](const Line& l) {
    double r = 0;
    for (int64_t i = l.n - 1; i >= 0; --i) {
      const int64_t o = l.out + i * l.out_step;
      const double li = double(lse[o]);
      if (li == kNegInf) {
        r = 0;
        gx[o] = T(0);
        continue;
      }
      const double carry = i + 1 < l.n ? std::exp(li - double(lse[o + l.out_step])) * r : 0.0;
      r = double(g[o]) + carry;
      gx[o] = T(std::exp(double(xs[l.in + i * l.in_step]) - li) * r);
    }
  });
}

}  // namespace

Tensor cumsum(const Tensor& a, int64_t axis, bool reverse) {
  require_cpu(a, "cumsum");
  const int64_t ax = scan_axis(a, axis, "cumsum");
  Tensor out = empty(a.shape(), a.dtype());
  ENG_DISPATCH(a.dtype(), T, cumsum_kernel<T>(a, ax, reverse, out.data<T>()));
  // each a[j] feeds every out[i] with i >= j, so its gradient is the sum of g[i] over i >= j
  return record(out, "cumsum", {a}, [ax, reverse](const Tensor& g) {
    return std::vector<Tensor>{cumsum(g, ax, !reverse)};
  });
}

Tensor logcumsumexp(const Tensor& a, int64_t axis) {
  require_cpu(a, "logcumsumexp");
  const int64_t ax = scan_axis(a, axis, "logcumsumexp");
  Tensor out = empty(a.shape(), a.dtype());
  ENG_DISPATCH(a.dtype(), T, logcumsumexp_kernel<T>(a, ax, out.data<T>()));
  const Tensor saved = out.detach();
  return record(out, "logcumsumexp", {a}, [a = a.detach(), saved, ax](const Tensor& g) {
    const Tensor gc = g.contiguous();
    Tensor gx = empty(a.shape(), a.dtype());
    ENG_DISPATCH(a.dtype(), T,
                 logcumsumexp_backward_kernel<T>(a, saved.data<T>(), gc.data<T>(), gx.data<T>(), ax));
    return std::vector<Tensor>{gx};
  });
}

}  // namespace eng
