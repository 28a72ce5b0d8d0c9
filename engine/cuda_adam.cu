// One Adam / AdamW step on device memory, element by element (a grid-stride loop). It reproduces the f32
// path of engine/optim.cpp exactly: the host computes the same AdamStep coefficients Adam::update does (in
// double, then rounded to float), and each element follows the scalar reference adam_ref of
// engine/vec_kernels_scalar.cpp operation for operation in double. The _rn intrinsics keep nvcc from
// fusing a multiply and an add into an FMA, which would round differently from the host's separate ops.
// It lives in engine/ (not with the op kernels of ops/cuda/) because the optimizers that call it do.
#include <cmath>

#include <algorithm>

#include "engine/cuda.h"
#include "engine/error.h"

namespace eng::cuda {
namespace {

// engine/vec_kernels.h's AdamStep with adaptive = true (plain Adam and AdamW always are).
struct AdamCoefficients {
  float decay, l2, b1, b2, step, vscale, eps;
};

//   p *= decay;  g += l2 p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= step * m / (sqrt(v) * vscale + eps)
__global__ void adam_kernel(float* p, const float* g, float* m, float* v, int64_t n, AdamCoefficients s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const double pk = __dmul_rn(double(p[i]), double(s.decay));
    const double gk = __dadd_rn(double(g[i]), __dmul_rn(double(s.l2), pk));
    const double mk = __dadd_rn(__dmul_rn(double(s.b1), double(m[i])), __dmul_rn(1.0 - double(s.b1), gk));
    const double vk =
        __dadd_rn(__dmul_rn(double(s.b2), double(v[i])), __dmul_rn(__dmul_rn(1.0 - double(s.b2), gk), gk));
    m[i] = float(mk);
    v[i] = float(vk);
    const double denom = __dadd_rn(__dmul_rn(__dsqrt_rn(vk), double(s.vscale)), double(s.eps));
    p[i] = float(__dsub_rn(pk, __dmul_rn(double(s.step), __ddiv_rn(mk, denom))));
  }
}

}  // namespace

void adam_update(float* param, const float* grad, float* m, float* v, int64_t n, double lr, double beta1,
                 double beta2, double eps, double weight_decay, bool decoupled, int64_t step) {
  ENG_CHECK(step >= 1, "cuda::adam_update: step counts this update and must be >= 1, got ", step);
  if (n <= 0) return;
  // As Adam::update (engine/optim.cpp), from the same values in double.
  const double b1 = beta1, b2 = beta2, wd = weight_decay;
  const double step_size = lr / (1 - std::pow(b1, double(step)));
  const double bc2_sqrt = std::sqrt(1 - std::pow(b2, double(step)));
  const AdamCoefficients s{float(decoupled ? 1 - lr * wd : 1.0), float(decoupled ? 0.0 : wd), float(b1), float(b2),
                           float(step_size), float(1 / bc2_sqrt), float(eps)};
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 16));
  adam_kernel<<<blocks, kThreads>>>(param, grad, m, v, n, s);
  check_launch("adam_kernel");
}

}  // namespace eng::cuda
