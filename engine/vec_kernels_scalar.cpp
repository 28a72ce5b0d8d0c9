// The scalar reference of every f32 kernel in engine/vec_kernels.h: plain loops over the std:: functions,
// with sums and statistics in double. The SIMD versions are tested against these; ENG_CPU=scalar runs them.
#include <cmath>
#include <limits>

#include "engine/vec_kernels.h"

namespace eng {
namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

double sigmoid_d(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }

void exp_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}
void log_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::log(x[i]);
}
void tanh_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}
void sigmoid_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(sigmoid_d(x[i]));
}
void silu_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(x[i] * sigmoid_d(x[i]));
}
void gelu_tanh_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    // 0.5 x (1 + tanh u) = x / (1 + e^{-2u}): the tanh form cancels to nothing in the lower tail
    y[i] = float(v / (1 + std::exp(-2 * kSqrt2OverPi * (v + kGeluCubic * v * v * v))));
  }
}
void gelu_erf_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(0.5 * x[i] * (1 + std::erf(x[i] * kSqrt1_2)));
}
void elu_ref(const float* x, float* y, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : float(alpha * std::expm1(double(x[i])));
}

void elu_plus_one_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] + 1 : std::exp(x[i]);
}

// with u = k (x + c x^3), t = tanh(u): d/dx = (1 + t) / 2 + x (1 - t^2) k (1 + 3 c x^2) / 2
void gelu_tanh_backward_ref(const float* g, const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i], t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const double du = kSqrt2OverPi * (1 + 3 * kGeluCubic * v * v);
    dx[i] = float(g[i] * 0.5 * ((1 + t) + v * (1 - t * t) * du));
  }
}
// d/dx = Phi(x) + x phi(x)
void gelu_erf_backward_ref(const float* g, const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    dx[i] = float(g[i] * (0.5 * (1 + std::erf(v * kSqrt1_2)) + v * kInvSqrt2Pi * std::exp(-0.5 * v * v)));
  }
}
void elu_backward_ref(const float* g, const float* x, float* dx, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0 ? g[i] : float(g[i] * double(alpha) * std::exp(double(x[i])));
}
// d/dx x s(x) = s (1 + x (1 - s))
void silu_backward_ref(const float* g, const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double s = sigmoid_d(x[i]);
    dx[i] = float(g[i] * s * (1 + x[i] * (1 - s)));
  }
}

void add_ref(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
void sub_ref(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] - b[i];
}
void mul_ref(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}
void div_ref(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] / b[i];
}

float sum_ref(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return float(s);
}
float max_ref(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    if (x[i] > m) m = x[i];
  }
  return m;
}
float dot_ref(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * double(b[i]);
  return float(s);
}

float exp_sub_sum_ref(const float* x, float m, float* y, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += y[i] = std::exp(x[i] - m);
  return float(s);
}

template <bool Log>
void softmax_row_ref(const float* x, float* y, int64_t n) {
  const float m = max_ref(x, n), inf = std::numeric_limits<float>::infinity();
  if (std::isnan(m) || m == -inf) {
    for (int64_t k = 0; k < n; ++k) y[k] = std::isnan(m) ? m : Log ? -inf : 0.f;
    return;
  }
  double total = 0;
  for (int64_t k = 0; k < n; ++k) total += std::exp(double(x[k]) - m);
  // (x - m) first: adding log(total) to a large m would round it away
  const double log_total = std::log(total);
  for (int64_t k = 0; k < n; ++k)
    y[k] = Log ? float((double(x[k]) - m) - log_total) : float(std::exp(double(x[k]) - m) / total);
}
void softmax_backward_row_ref(const float* y, const float* g, float* dx, int64_t n) {
  double t = 0;
  for (int64_t k = 0; k < n; ++k) t += double(g[k]) * double(y[k]);
  for (int64_t k = 0; k < n; ++k) dx[k] = float(double(y[k]) * (double(g[k]) - t));
}
void log_softmax_backward_row_ref(const float* y, const float* g, float* dx, int64_t n) {
  double t = 0;
  for (int64_t k = 0; k < n; ++k) t += g[k];
  for (int64_t k = 0; k < n; ++k) dx[k] = float(double(g[k]) - std::exp(double(y[k])) * t);
}

void norm_row_ref(const float* x, const float* w, const float* b, float* y, int64_t c, float eps, float* mean,
                  float* rstd) {
  double mu = 0, var = 0;
  if (mean) {
    for (int64_t j = 0; j < c; ++j) mu += x[j];
    mu /= double(c);
  }
  for (int64_t j = 0; j < c; ++j) var += (x[j] - mu) * (x[j] - mu);
  const double rs = 1 / std::sqrt(var / double(c) + eps);
  for (int64_t j = 0; j < c; ++j) {
    double v = (x[j] - mu) * rs;
    if (w) v *= w[j];
    if (b) v += b[j];
    y[j] = float(v);
  }
  if (mean) *mean = float(mu);
  *rstd = float(rs);
}
void norm_backward_row_ref(const float* x, const float* w, const float* mean, float rstd, const float* g, float* dx,
                           float* dw, float* db, int64_t c) {
  const double mu = mean ? *mean : 0.0;
  double dn_mean = 0, dn_xhat_mean = 0;
  for (int64_t j = 0; j < c; ++j) {
    const double dn = double(g[j]) * (w ? w[j] : 1.0);
    dn_mean += dn;
    dn_xhat_mean += dn * (x[j] - mu) * rstd;
  }
  dn_mean = mean ? dn_mean / double(c) : 0.0;
  dn_xhat_mean /= double(c);
  for (int64_t j = 0; j < c; ++j) {
    const double dn = double(g[j]) * (w ? w[j] : 1.0);
    dx[j] = float(rstd * (dn - dn_mean - (x[j] - mu) * rstd * dn_xhat_mean));
  }
  const float muf = mean ? *mean : 0.f;
  for (int64_t j = 0; j < c; ++j) {
    if (dw) dw[j] += g[j] * ((x[j] - muf) * rstd);
    if (db) db[j] += g[j];
  }
}

float cross_entropy_row_ref(const float* x, int64_t c, int64_t t, float on, float uniform, float* lse) {
  // The max taken in float and widened once is the same value; a double fmax over floats makes aarch64 g++ 12.2
  // fail at -O3 (internal compiler error in the vectoriser).
  float mxf = x[0];
  for (int64_t j = 1; j < c; ++j) mxf = std::fmax(mxf, x[j]);
  double mx = mxf, sum = 0, total = 0;
  for (int64_t j = 0; j < c; ++j) {
    sum += std::exp(x[j] - mx);
    total += x[j];
  }
  const double l = mx + std::log(sum);
  *lse = float(l);
  return float(l - double(on) * x[t] - double(uniform) * total);
}
void cross_entropy_backward_row_ref(const float* x, int64_t c, int64_t t, float lse, float on, float uniform,
                                    float scale, float* gx) {
  for (int64_t j = 0; j < c; ++j) gx[j] = float((std::exp(double(x[j]) - lse) - uniform) * scale);
  gx[t] -= on * scale;
}
float cross_entropy_grad_row_ref(const float* x, int64_t c, int64_t t, double scale, float b, float on_scale,
                                 float* gx, float* mx) {
  *mx = max_ref(x, c);
  const float s = exp_sub_sum_ref(x, *mx, gx, c);
  const float a = float(scale / double(s));
  for (int64_t j = 0; j < c; ++j) gx[j] = gx[j] * a - b;
  gx[t] -= on_scale;
  return s;
}

void adam_ref(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s) {
  for (int64_t k = 0; k < n; ++k) {
    const double pk = double(p[k]) * s.decay, gk = g[k] + double(s.l2) * pk;
    const double mk = s.b1 * double(m[k]) + (1 - double(s.b1)) * gk;
    const double vk = s.b2 * double(v[k]) + (1 - double(s.b2)) * gk * gk;
    m[k] = float(mk);
    v[k] = float(vk);
    p[k] = float(pk - double(s.step) * (s.adaptive ? mk / (std::sqrt(vk) * s.vscale + s.eps) : mk));
  }
}

// Filled field by field, by name: two kernels of one signature cannot trade places unseen, and a field left out
// stays null, which tests/test_vec_kernels.cpp refuses.
constexpr VecKernels make_scalar_table() {
  VecKernels k{};
  k.name = "scalar";
  k.exp = exp_ref;
  k.log = log_ref;
  k.tanh = tanh_ref;
  k.sigmoid = sigmoid_ref;
  k.silu = silu_ref;
  k.gelu_tanh = gelu_tanh_ref;
  k.gelu_erf = gelu_erf_ref;
  k.elu = elu_ref;
  k.elu_plus_one = elu_plus_one_ref;
  k.gelu_tanh_backward = ENG_VEC_TRAINING(gelu_tanh_backward_ref);
  k.gelu_erf_backward = ENG_VEC_TRAINING(gelu_erf_backward_ref);
  k.elu_backward = ENG_VEC_TRAINING(elu_backward_ref);
  k.silu_backward = ENG_VEC_TRAINING(silu_backward_ref);
  k.add = add_ref;
  k.sub = sub_ref;
  k.mul = mul_ref;
  k.div = div_ref;
  k.sum = sum_ref;
  k.max = max_ref;
  k.dot = dot_ref;
  k.exp_sub_sum = exp_sub_sum_ref;
  k.softmax_row = softmax_row_ref<false>;
  k.log_softmax_row = softmax_row_ref<true>;
  k.softmax_backward_row = ENG_VEC_TRAINING(softmax_backward_row_ref);
  k.log_softmax_backward_row = ENG_VEC_TRAINING(log_softmax_backward_row_ref);
  k.norm_row = norm_row_ref;
  k.norm_backward_row = ENG_VEC_TRAINING(norm_backward_row_ref);
  k.cross_entropy_row = ENG_VEC_TRAINING(cross_entropy_row_ref);
  k.cross_entropy_backward_row = ENG_VEC_TRAINING(cross_entropy_backward_row_ref);
  k.cross_entropy_grad_row = ENG_VEC_TRAINING(cross_entropy_grad_row_ref);
  k.adam = ENG_VEC_TRAINING(adam_ref);
  return k;
}

constexpr VecKernels scalar_table = make_scalar_table();

}  // namespace

const VecKernels& scalar_vec_kernels() { return scalar_table; }

}  // namespace eng
