#include "ops/gemm.h"

#include <algorithm>
#include <vector>

namespace eng {

template <class T>
void gemm_reference(const GemmArgs<T>& g) {
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t n = 0; n < g.N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < g.K; ++k) acc += double(g.A[m * g.a_rs + k * g.a_cs]) * double(g.B[k * g.b_rs + n * g.b_cs]);
      T* c = &g.C[m * g.c_rs + n];
      *c = g.accumulate ? T(*c + acc) : T(acc);
    }
}

// Cache-blocked i-k-j loop: the innermost loop runs along a contiguous row of B and C, which the
// compiler vectorises. B is packed into a contiguous [kc, nc] panel when its rows are strided.
template <class T>
void gemm(const GemmArgs<T>& g) {
  constexpr int64_t kKc = 256, kNc = 512, kMc = 64;
  if (!g.accumulate)
    for (int64_t m = 0; m < g.M; ++m) std::fill(g.C + m * g.c_rs, g.C + m * g.c_rs + g.N, T(0));
  std::vector<T> panel(size_t(std::min(kKc, g.K) * std::min(kNc, g.N)));
  for (int64_t n0 = 0; n0 < g.N; n0 += kNc) {
    const int64_t nc = std::min(kNc, g.N - n0);
    for (int64_t k0 = 0; k0 < g.K; k0 += kKc) {
      const int64_t kc = std::min(kKc, g.K - k0);
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t n = 0; n < nc; ++n) panel[size_t(k * nc + n)] = g.B[(k0 + k) * g.b_rs + (n0 + n) * g.b_cs];
      for (int64_t m0 = 0; m0 < g.M; m0 += kMc) {
        const int64_t mc = std::min(kMc, g.M - m0);
        for (int64_t m = m0; m < m0 + mc; ++m) {
          T* c = g.C + m * g.c_rs + n0;
          const T* a = g.A + m * g.a_rs + k0 * g.a_cs;
          for (int64_t k = 0; k < kc; ++k) {
            const T av = a[k * g.a_cs];
            const T* b = panel.data() + k * nc;
            for (int64_t n = 0; n < nc; ++n) c[n] += av * b[n];
          }
        }
      }
    }
  }
}

template void gemm_reference<float>(const GemmArgs<float>&);
template void gemm_reference<double>(const GemmArgs<double>&);
template void gemm<float>(const GemmArgs<float>&);
template void gemm<double>(const GemmArgs<double>&);

}  // namespace eng
