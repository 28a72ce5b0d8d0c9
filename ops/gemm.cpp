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

// Cache-blocked GEMM. B is packed into a contiguous [kc, nc] panel; then each 4 x 32 tile of C is
// accumulated in registers over the panel's k range (the compiler keeps acc[4][32] in vector registers
// and vectorises the j loop), so each loaded B vector serves four rows. Tiles at the edges use the
// same loop with bounds. target_clones builds AVX-512, AVX2 and baseline versions and picks one at
// load time from the CPU.
#if defined(__x86_64__) && !defined(ENG_SANITIZE)
#define ENG_GEMM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ENG_GEMM_CLONES
#endif

namespace {

constexpr int64_t kMr = 4, kNr = 32;

template <class T>
__attribute__((always_inline)) inline void tile_full(const GemmArgs<T>& g, const T* panel, int64_t nc, int64_t kc, int64_t m, int64_t k0, int64_t n,
                      int64_t n0) {
  T acc[kMr][kNr] = {};
  const T* a = g.A + m * g.a_rs + k0 * g.a_cs;
  for (int64_t k = 0; k < kc; ++k) {
    const T* b = panel + k * nc + n;
    for (int64_t r = 0; r < kMr; ++r) {
      const T av = a[r * g.a_rs + k * g.a_cs];
      for (int64_t j = 0; j < kNr; ++j) acc[r][j] += av * b[j];
    }
  }
  for (int64_t r = 0; r < kMr; ++r) {
    T* c = g.C + (m + r) * g.c_rs + n0 + n;
    for (int64_t j = 0; j < kNr; ++j) c[j] += acc[r][j];
  }
}

template <class T>
__attribute__((always_inline)) inline void tile_edge(const GemmArgs<T>& g, const T* panel, int64_t nc, int64_t kc, int64_t m, int64_t mr, int64_t k0,
                      int64_t n, int64_t nr, int64_t n0) {
  for (int64_t r = 0; r < mr; ++r) {
    T* c = g.C + (m + r) * g.c_rs + n0 + n;
    const T* a = g.A + (m + r) * g.a_rs + k0 * g.a_cs;
    for (int64_t k = 0; k < kc; ++k) {
      const T av = a[k * g.a_cs];
      const T* b = panel + k * nc + n;
      for (int64_t j = 0; j < nr; ++j) c[j] += av * b[j];
    }
  }
}

template <class T>
__attribute__((always_inline)) inline void gemm_blocked(const GemmArgs<T>& g) {
  constexpr int64_t kKc = 256, kNc = 512;
  if (!g.accumulate)
    for (int64_t m = 0; m < g.M; ++m) std::fill(g.C + m * g.c_rs, g.C + m * g.c_rs + g.N, T(0));
  std::vector<T> panel(size_t(std::min(kKc, g.K) * std::min(kNc, g.N)));
  for (int64_t n0 = 0; n0 < g.N; n0 += kNc) {
    const int64_t nc = std::min(kNc, g.N - n0);
    for (int64_t k0 = 0; k0 < g.K; k0 += kKc) {
      const int64_t kc = std::min(kKc, g.K - k0);
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t n = 0; n < nc; ++n) panel[size_t(k * nc + n)] = g.B[(k0 + k) * g.b_rs + (n0 + n) * g.b_cs];
      for (int64_t m = 0; m < g.M; m += kMr) {
        const int64_t mr = std::min(kMr, g.M - m);
        for (int64_t n = 0; n < nc; n += kNr) {
          const int64_t nr = std::min(kNr, nc - n);
          if (mr == kMr && nr == kNr)
            tile_full(g, panel.data(), nc, kc, m, k0, n, n0);
          else
            tile_edge(g, panel.data(), nc, kc, m, mr, k0, n, nr, n0);
        }
      }
    }
  }
}

// The clones are plain functions (clang cannot clone templates); the kernel is inlined into each.
ENG_GEMM_CLONES void gemm_f32(const GemmArgs<float>& g) { gemm_blocked(g); }
ENG_GEMM_CLONES void gemm_f64(const GemmArgs<double>& g) { gemm_blocked(g); }

}  // namespace

template <>
void gemm<float>(const GemmArgs<float>& g) {
  gemm_f32(g);
}

template <>
void gemm<double>(const GemmArgs<double>& g) {
  gemm_f64(g);
}

template void gemm_reference<float>(const GemmArgs<float>&);
template void gemm_reference<double>(const GemmArgs<double>&);

}  // namespace eng
