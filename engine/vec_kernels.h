// The f32 kernels of the memory-bound and transcendental ops, one table per instruction-set level:
// a scalar reference (engine/vec_kernels_scalar.cpp, plain loops over std:: functions) and SIMD versions
// (engine/vec_kernels_{avx2,avx512,neon}.cpp, one generic body in engine/vec_kernels_simd.h). vec_kernels()
// picks the best the CPU runs at start, capped by ENG_CPU (engine/cpu_features.h). Every pointer argument
// is contiguous; n counts floats. Each kernel is serial: the ops split the work over threads.
//
// Accuracy of the SIMD versions against the scalar reference (tests/test_vec_kernels.cpp checks each):
//   exp, sigmoid, silu, expm1-based elu: 4 ulp relative; tanh 5 ulp (relative near 0 too); log 3 ulp;
//   gelu_tanh 6 ulp for x >= 0 (below, the f32 rounding of u is amplified by |2u|: 2e-5 relative);
//   gelu_erf 8e-7 absolute (erf by a rational form, 2.4e-7 at worst in f32). exp gives 0 below -87.3 (no
//   denormals). Sums and row statistics are accumulated in W lanes, so they differ from the reference's
//   serial double sums by float rounding only.
#pragma once
#include <cstdint>

#include "engine/cpu_features.h"

namespace eng {

// One Adam-family step, element by element (see engine/optim.cpp for how each optimizer fills it):
//   p *= decay;  g += l2 * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= step * (adaptive ? m / (sqrt(v) * vscale + eps) : m)
struct AdamStep {
  float decay, l2, b1, b2, step, vscale, eps;
  bool adaptive;
};

struct VecKernels {
  const char* name;
  // y = f(x)
  void (*exp)(const float* x, float* y, int64_t n);
  void (*log)(const float* x, float* y, int64_t n);
  void (*tanh)(const float* x, float* y, int64_t n);
  void (*sigmoid)(const float* x, float* y, int64_t n);
  void (*silu)(const float* x, float* y, int64_t n);
  void (*gelu_tanh)(const float* x, float* y, int64_t n);
  void (*gelu_erf)(const float* x, float* y, int64_t n);
  void (*elu)(const float* x, float* y, int64_t n, float alpha);
  void (*elu_plus_one)(const float* x, float* y, int64_t n);  // x > 0 ? x + 1 : e^x (linear attention's map)
  // dx = g * f'(x), from the op's input x
  void (*gelu_tanh_backward)(const float* g, const float* x, float* dx, int64_t n);
  void (*gelu_erf_backward)(const float* g, const float* x, float* dx, int64_t n);
  void (*elu_backward)(const float* g, const float* x, float* dx, int64_t n, float alpha);
  void (*silu_backward)(const float* g, const float* x, float* dx, int64_t n);
  // y = a (op) b
  void (*add)(const float* a, const float* b, float* y, int64_t n);
  void (*sub)(const float* a, const float* b, float* y, int64_t n);
  void (*mul)(const float* a, const float* b, float* y, int64_t n);
  void (*div)(const float* a, const float* b, float* y, int64_t n);
  // reductions over n floats (max of an empty range is -inf; NaN anywhere gives NaN)
  float (*sum)(const float* x, int64_t n);
  float (*max)(const float* x, int64_t n);
  float (*dot)(const float* a, const float* b, int64_t n);
  // y = exp(x - m) and the sum of y, for x - m <= 0 (the inner step of an online softmax; -inf gives 0)
  float (*exp_sub_sum)(const float* x, float m, float* y, int64_t n);
  // One row of n: softmax / log-softmax, NaN anywhere making the row NaN and an all -inf row giving
  // 0 (softmax) or -inf (log); backward from the saved output y and the incoming gradient g.
  void (*softmax_row)(const float* x, float* y, int64_t n);
  void (*log_softmax_row)(const float* x, float* y, int64_t n);
  void (*softmax_backward_row)(const float* y, const float* g, float* dx, int64_t n);
  void (*log_softmax_backward_row)(const float* y, const float* g, float* dx, int64_t n);
  // One row of c: mu = mean(x) (0 when mean is null: rms-norm), rstd = 1 / sqrt(mean((x - mu)^2) + eps),
  // y = (x - mu) rstd w + b (w, b may be null). Writes *mean (if given) and *rstd.
  void (*norm_row)(const float* x, const float* w, const float* b, float* y, int64_t c, float eps, float* mean,
                   float* rstd);
  // dx of that row from g: dn = g w, dx = rstd (dn - mean(dn) - xhat mean(dn xhat)), the mean(dn) term
  // only when centred (mean non-null); and the row's parameter gradients in the same pass,
  // dw[j] += g[j] xhat[j] and db[j] += g[j] (each may be null), in float: xhat = (x - mean) rstd.
  void (*norm_backward_row)(const float* x, const float* w, const float* mean, float rstd, const float* g,
                            float* dx, float* dw, float* db, int64_t c);
  // Cross-entropy of one row of c logits against the target distribution q = on [j == t] + uniform:
  // returns lse - on x_t - uniform sum(x), with lse = log sum exp(x) written to *lse.
  float (*cross_entropy_row)(const float* x, int64_t c, int64_t t, float on, float uniform, float* lse);
  // gx = (exp(x - lse) - uniform) scale, then gx[t] -= on scale.
  void (*cross_entropy_backward_row)(const float* x, int64_t c, int64_t t, float lse, float on, float uniform,
                                     float scale, float* gx);
  // Both at once, the row read from memory once (the training loss): e_j = exp(x_j - max) into gx and
  // s = sum_j e_j, then gx_j = e_j a - b with a = float(scale / s), and gx[t] -= on_scale (b = uniform scale and
  // on_scale = on scale, rounded by the caller). Returns s and writes the row max to *mx (NaN anywhere: NaN).
  float (*cross_entropy_grad_row)(const float* x, int64_t c, int64_t t, double scale, float b, float on_scale,
                                  float* gx, float* mx);
  void (*adam)(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s);
};

// ENG_VEC_INFERENCE_ONLY (the lean embed's build, Makefile): the training entries of each table (the backward
// passes, the losses, Adam) are left out, so that a program that only generates does not link their code; each is
// then vec_left_out, which fails saying so. Elsewhere ENG_VEC_TRAINING(fn) is fn.
[[noreturn]] void vec_training_kernel_left_out();
template <class R, class... A>
R vec_left_out(A...) {
  vec_training_kernel_left_out();
}
#ifdef ENG_VEC_INFERENCE_ONLY
#define ENG_VEC_TRAINING(fn) vec_left_out
#else
#define ENG_VEC_TRAINING(fn) fn
#endif

// The table for the level simd_level() chose.
const VecKernels& vec_kernels();
// The table for one level, falling back to the next lower level this build or CPU lacks; not capped by
// ENG_CPU, so that the tests compare every table the CPU runs against the scalar reference.
const VecKernels& vec_kernels_for(SimdLevel level);

}  // namespace eng
