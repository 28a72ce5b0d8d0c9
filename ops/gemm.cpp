#include "ops/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <type_traits>

#include "engine/error.h"
#include "engine/simd_cap.h"
#include "engine/threadpool.h"
#include "engine/vec_kernels.h"
#include "ops/gemm_kernels.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace eng {

template <class T>
void gemm_reference(const GemmArgs<T>& g) {
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t n = 0; n < g.N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < g.K; ++k) acc += double(g.A[m * g.a_rs + k * g.a_cs]) * double(g.B[k * g.b_rs + n * g.b_cs]);
      T* c = &g.C[m * g.c_rs + n];
      *c = g.accumulate ? T(*c + acc) : g.bias ? T(g.bias[n] + acc) : T(acc);
    }
}

// The driver (Goto's algorithm, as in BLIS): B is packed a slab of K at a time into kc x nr panels that
// stream through L2, A into mr x kc panels that stay in L1, and a micro-kernel (ops/gemm_kernels.h)
// updates one mr x nr tile of C per panel pair. Jobs are row blocks of C (and column blocks when there are
// too few rows), each packing its own A; threads take jobs as they come. Every kernel call continues the
// C element's multiply-add chain where the previous k slice left it, so neither the slicing nor the jobs
// change the bits.
namespace {

using gemm_detail::KernelSet;
using gemm_detail::kSlotA;
using gemm_detail::kSlotB;
using gemm_detail::scratch;

constexpr int64_t kMaxTile = 16 * 32;            // largest mr x nr of any kernel set
constexpr int64_t kSlabElems = int64_t(1) << 22;  // packed B: 16 MiB of f32 at most
constexpr int64_t kSmallWork = int64_t(1) << 18;  // M·N·K up to this (64³) is not worth packing
constexpr int64_t kThreadWork = int64_t(1) << 21;  // M·N·K from this on is split over threads

// Portable micro-kernel (the scalar level, other architectures, f64): the compiler vectorises the j loop
// for the baseline instruction set.
template <class T, int MR, int NR>
void portable_kernel(int64_t K, const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t ldb, T* c, int64_t ldc,
                     bool load_c) {
  T acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = load_c ? c[r * ldc + j] : T(0);
  for (int64_t k = 0; k < K; ++k, a += a_cs, b += ldb)
    for (int r = 0; r < MR; ++r) {
      const T av = a[r * a_rs];
      for (int j = 0; j < NR; ++j) acc[r][j] += av * b[j];
    }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) c[r * ldc + j] = acc[r][j];
}

template <class T>
void transpose_portable(const T* src, int64_t rs, int64_t rows, int64_t width, int64_t kc, T* dst, int64_t ld) {
  for (int64_t k = 0; k < kc; ++k)
    for (int64_t r = 0; r < width; ++r) dst[k * ld + r] = r < rows ? src[r * rs + k] : T(0);
}

template <class T, int MR, int NR>
KernelSet<T> portable_kernels() {
  KernelSet<T> s;
  s.mr = MR, s.nr = NR;
  s.kc = 256, s.nc = 512, s.mc = 32 * MR;
  s.kernel = portable_kernel<T, MR, NR>;
  s.transpose = transpose_portable<T>;
  return s;
}

template <class T>
const KernelSet<T>& kernels_for(SimdLevel level);

template <>
const KernelSet<float>& kernels_for<float>([[maybe_unused]] SimdLevel level) {
#if defined(__x86_64__)
  if (built_for(SimdLevel::Avx512) && level >= SimdLevel::Avx512) {
    static const KernelSet<float> avx512 = gemm_detail::avx512_kernels();
    return avx512;
  }
  if (built_for(SimdLevel::Avx2) && level >= SimdLevel::Avx2) {
    static const KernelSet<float> avx2 = gemm_detail::avx2_kernels();
    return avx2;
  }
#endif
  static const KernelSet<float> portable = portable_kernels<float, 4, 16>();
  return portable;
}

template <>
const KernelSet<double>& kernels_for<double>(SimdLevel) {
  static const KernelSet<double> portable = portable_kernels<double, 4, 8>();
  return portable;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void* gemm_detail::scratch_block(size_t bytes) {
  constexpr size_t kHuge = size_t(1) << 21;
  const size_t align = bytes >= kHuge ? kHuge : 64;
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  ENG_CHECK(p, "gemm: cannot allocate a packing buffer of ", bytes, " bytes");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == kHuge) ::madvise(p, (bytes + align - 1) / align * align, MADV_HUGEPAGE);  // advice: failure is harmless
#endif
  return p;
}

namespace {

// Panels of NR values per row from `panels` consecutive runs of NR in each of kc rows rs apart: dst[(q * kc + k) *
// NR + j] = src[k * rs + q * NR + j]. k is the outer loop, so each row is read once, in order, for all the panels.
// These copies stay out of line: inlined, they changed GCC's inlining elsewhere in this file, and the batched
// 512 x 64 x 512 products (the small-product path, which never calls them) ran 7 % slower on one core.
template <int NR, class T>
__attribute__((noinline)) void copy_panel_rows(const T* src, int64_t rs, int64_t panels, int64_t kc, T* dst) {
  for (int64_t k = 0; k < kc; ++k, src += rs)
    for (int64_t q = 0; q < panels; ++q)
      for (int j = 0; j < NR; ++j) dst[(q * kc + k) * NR + j] = src[q * NR + j];
}

// The same in blocks of 16 rows, panel by panel within a block: the block's rows stay in L1 while every panel
// takes its part, and each panel is written in runs of 16 * NR values.
template <int NR, class T>
__attribute__((noinline)) void copy_panel_rows_blocked(const T* src, int64_t rs, int64_t panels, int64_t kc, T* dst) {
  for (int64_t k0 = 0; k0 < kc; k0 += 16) {
    const int64_t kb = std::min<int64_t>(16, kc - k0);
    for (int64_t q = 0; q < panels; ++q)
      for (int64_t k = k0; k < k0 + kb; ++k)
        for (int j = 0; j < NR; ++j) dst[(q * kc + k) * NR + j] = src[k * rs + q * NR + j];
  }
}

// Rows m0 .. m0+rows, columns k0 .. k0+kc of A as panels of mr rows, k-major: element (r, k) of panel p at
// dst[p * mr * kc + k * mr + r]. The last panel is padded with zero rows.
// Panels of `mr` rows, which need not be ks.mr (gemm with PackedB also packs for ks.mr_short).
template <class T>
void pack_a(const GemmArgs<T>& g, const KernelSet<T>& ks, int64_t mr, int64_t m0, int64_t rows, int64_t k0, int64_t kc,
            T* dst) {
  int64_t p = 0;
  if (g.a_rs == 1 && g.a_cs != 1) {  // A transposed (a weight gradient's xᵀ): the whole panels, 16 k at a time
    const T* src = g.A + m0 + k0 * g.a_cs;
    const int64_t panels = rows / mr;
    switch (mr) {  // the kernel sets' tile heights; another would go panel by panel below
      case 14: copy_panel_rows_blocked<14>(src, g.a_cs, panels, kc, dst), p = panels * mr; break;
      case 8: copy_panel_rows_blocked<8>(src, g.a_cs, panels, kc, dst), p = panels * mr; break;
      case 6: copy_panel_rows_blocked<6>(src, g.a_cs, panels, kc, dst), p = panels * mr; break;
      case 4: copy_panel_rows_blocked<4>(src, g.a_cs, panels, kc, dst), p = panels * mr; break;
      default: break;
    }
    dst += p * kc;
  }
  for (; p < rows; p += mr, dst += mr * kc) {
    const int64_t n = std::min(mr, rows - p);
    const T* src = g.A + (m0 + p) * g.a_rs + k0 * g.a_cs;
    if (g.a_cs == 1) {  // rows run along k: transpose a few at a time
      const int64_t tr = ks.transpose_rows;
      for (int64_t r = 0; r < mr; r += tr)
        ks.transpose(r < n ? src + r * g.a_rs : src, g.a_rs, std::clamp<int64_t>(n - r, 0, tr),
                     std::min(tr, mr - r), kc, dst + r, mr);
    } else {
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t r = 0; r < mr; ++r) dst[k * mr + r] = r < n ? src[r * g.a_rs + k * g.a_cs] : T(0);
    }
  }
}

template <class T>
void pack_a(const GemmArgs<T>& g, const KernelSet<T>& ks, int64_t m0, int64_t rows, int64_t k0, int64_t kc, T* dst) {
  pack_a(g, ks, ks.mr, m0, rows, k0, kc, dst);
}

// dst[k * NR + j] = src[k * rs + j] for k < kc, j < NR.
template <int NR, class T>
void copy_rows(const T* src, int64_t rs, int64_t kc, T* dst) {
  for (int64_t k = 0; k < kc; ++k, src += rs, dst += NR)
    for (int j = 0; j < NR; ++j) dst[j] = src[j];
}

// Columns n0 .. n0+nr, rows k0 .. k0+kc of B as one panel (row k at dst + k * nr); columns past N are zero.
template <class T>
void pack_b(const GemmArgs<T>& g, const KernelSet<T>& ks, int64_t n0, int64_t k0, int64_t kc, T* dst) {
  const int64_t nr = ks.nr, n = std::min(nr, g.N - n0);
  const T* src = g.B + k0 * g.b_rs + n0 * g.b_cs;
  if (g.b_rs == 1 && g.b_cs != 1) {  // columns run along k (B transposed): transpose a few at a time
    const int64_t tr = ks.transpose_rows;
    for (int64_t j = 0; j < nr; j += tr)
      ks.transpose(j < n ? src + j * g.b_cs : src, g.b_cs, std::clamp<int64_t>(n - j, 0, tr), std::min(tr, nr - j),
                   kc, dst + j, nr);
  } else if (g.b_cs == 1 && n == nr) {  // rows contiguous: copies of a width the compiler knows
    switch (nr) {
      case 32: return copy_rows<32>(src, g.b_rs, kc, dst);
      case 16: return copy_rows<16>(src, g.b_rs, kc, dst);
      case 8: return copy_rows<8>(src, g.b_rs, kc, dst);
      default: break;
    }
    for (int64_t k = 0; k < kc; ++k) std::copy(src + k * g.b_rs, src + k * g.b_rs + nr, dst + k * nr);
  } else {
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t j = 0; j < n; ++j) dst[k * nr + j] = src[k * g.b_rs + j * g.b_cs];
      for (int64_t j = n; j < nr; ++j) dst[k * nr + j] = T(0);
    }
  }
}

// Panels q0 .. q1 of rows k0 .. k0+kc of B, panel q at dst + (q - q0) * kc * nr. With B's rows contiguous, k is
// the outer loop over the full panels: each row of B is read once, in order, for all of them, where one panel at a
// time reads nr values from each row (on large products every row a new page, no prefetcher crossing to it).
template <class T>
void pack_b_panels(const GemmArgs<T>& g, const KernelSet<T>& ks, int64_t q0, int64_t q1, int64_t k0, int64_t kc,
                   T* dst) {
  const int64_t nr = ks.nr;
  int64_t full = g.b_cs == 1 ? std::max(q0, std::min(q1, g.N / nr)) : q0;
  const T* src = g.B + k0 * g.b_rs + q0 * nr;
  switch (full > q0 ? nr : 0) {  // copies of a width the compiler knows
    case 32: copy_panel_rows<32>(src, g.b_rs, full - q0, kc, dst); break;
    case 16: copy_panel_rows<16>(src, g.b_rs, full - q0, kc, dst); break;
    case 8: copy_panel_rows<8>(src, g.b_rs, full - q0, kc, dst); break;
    default: full = q0;  // no full panel (or a width without a copy here): panel by panel
  }
  for (int64_t q = full; q < q1; ++q) pack_b(g, ks, q * nr, k0, kc, dst + (q - q0) * kc * nr);
}

// One tile of C whose valid part is rows x cols: a full tile goes straight to C, an edge tile through a
// padded copy, so that no kernel reads or writes C outside the matrix. With `bias` (the tile's first column of
// it) and no C to load, the tile starts from the bias rows.
// The tile is mr x ks.nr, run by `kernel` (ks.kernel, or ks.kernel_short for mr = ks.mr_short).
template <class T>
void run_tile(const KernelSet<T>& ks, int64_t mr, gemm_detail::MicroKernel<T> kernel, int64_t K, const T* a,
              int64_t a_rs, int64_t a_cs, const T* b, int64_t ldb, T* c, int64_t ldc, int64_t rows, int64_t cols,
              bool load_c, const T* bias) {
  if (rows == mr && cols == ks.nr) {
    if (bias && !load_c) gemm_detail::fill_rows(c, ldc, rows, bias, cols);
    kernel(K, a, a_rs, a_cs, b, ldb, c, ldc, load_c || bias);
    return;
  }
  alignas(64) T tmp[kMaxTile] = {};
  if (load_c)
    for (int64_t r = 0; r < rows; ++r) std::copy(c + r * ldc, c + r * ldc + cols, tmp + r * ks.nr);
  else if (bias)
    gemm_detail::fill_rows(tmp, ks.nr, rows, bias, cols), load_c = true;
  kernel(K, a, a_rs, a_cs, b, ldb, tmp, ks.nr, load_c);
  for (int64_t r = 0; r < rows; ++r) std::copy(tmp + r * ks.nr, tmp + r * ks.nr + cols, c + r * ldc);
}

template <class T>
void run_tile(const KernelSet<T>& ks, int64_t K, const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t ldb,
              T* c, int64_t ldc, int64_t rows, int64_t cols, bool load_c, const T* bias = nullptr) {
  run_tile(ks, ks.mr, ks.kernel, K, a, a_rs, a_cs, b, ldb, c, ldc, rows, cols, load_c, bias);
}

// A row or two times a B whose columns are contiguous along k (x Wᵀ for a Linear layer's weight W, as in
// generation at batch 1): each C element is a dot product over contiguous memory, read once, no packing.
// Each dot is computed whole by one thread, so the result does not depend on the thread split.
constexpr int64_t kDotRows = 2;

// Eight partial sums in a fixed order; f32 runs the SIMD dot of engine/vec_kernels.h.
template <class T>
T dot(const T* a, const T* b, int64_t K) {
  T part[8] = {};
  int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    for (int j = 0; j < 8; ++j) part[j] += a[k + j] * b[k + j];
  T acc = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; k < K; ++k) acc += a[k] * b[k];
  return acc;
}
float dot(const float* a, const float* b, int64_t K) { return vec_kernels().dot(a, b, K); }

template <class T>
void gemm_dots(const GemmArgs<T>& g, bool threaded) {
  parallel_for(0, g.N, threaded ? std::max<int64_t>(1, g.N / 64) : g.N, [&](int64_t lo, int64_t hi) {
    for (int64_t m = 0; m < g.M; ++m) {
      const T* a = g.A + m * g.a_rs;
      for (int64_t n = lo; n < hi; ++n) {
        const T acc = dot(a, g.B + n * g.b_cs, g.K);
        T* c = g.C + m * g.c_rs + n;
        *c = g.accumulate ? *c + acc : g.bias ? g.bias[n] + acc : acc;
      }
    }
  });
}

// A few rows times a B whose columns run along k (C = A·Wᵀ, a Linear layer on a batch of single tokens, as in
// generation with many sequences in flight): blocks of dot products over W as stored. W is read from memory once
// and never packed (packing it costs as much as the product at these sizes); the rows of A stay in cache. Each
// block of kDotNr columns belongs to one thread, and every element is computed the same way in any block, so the
// thread split never changes the bits.
constexpr int64_t kDotBlockRows = 48;

void gemm_dot_blocks(const GemmArgs<float>& g, gemm_detail::DotBlockFn fn, bool threaded) {
  using gemm_detail::kDotMr;
  using gemm_detail::kDotNr;
  const int64_t blocks = ceil_div(g.N, kDotNr);
  parallel_for(0, blocks, threaded ? std::max<int64_t>(1, blocks / 32) : blocks, [&](int64_t lo, int64_t hi) {
    for (int64_t q = lo; q < hi; ++q) {
      const int64_t n0 = q * kDotNr, cols = std::min(kDotNr, g.N - n0);
      for (int64_t m0 = 0; m0 < g.M; m0 += kDotMr) {
        const int64_t rows = std::min(kDotMr, g.M - m0);
        float* c = g.C + m0 * g.c_rs + n0;
        if (g.bias && !g.accumulate) gemm_detail::fill_rows(c, g.c_rs, rows, g.bias + n0, cols);
        fn(g.K, g.A + m0 * g.a_rs, g.a_rs, rows, g.B + n0 * g.b_cs, g.b_cs, cols, c, g.c_rs, g.accumulate || g.bias);
      }
    }
  });
}

// Small products (see in_place), and those with few rows (B would be packed for little reuse): A is read in place
// (only the rows past the last full tile are packed), B too when its rows are contiguous, else one panel at a time.
// Rows past the last full tile that fit the short tile run on it (64 = 4 x 14 + 8 on AVX-512: no 14-row tile for 8
// rows, nor its copy in and out of C).
template <class T>
void gemm_small(const GemmArgs<T>& g, const KernelSet<T>& ks, bool threaded) {
  const int64_t mr = ks.mr, nr = ks.nr, full = g.M / mr * mr, n_panels = ceil_div(g.N, nr);
  const bool short_tail = ks.mr_short > 0 && g.M - full <= ks.mr_short;
  const int64_t tail_mr = short_tail ? ks.mr_short : mr;
  const gemm_detail::MicroKernel<T> tail_kernel = short_tail ? ks.kernel_short : ks.kernel;
  parallel_for(0, n_panels, threaded ? 1 : n_panels, [&](int64_t lo, int64_t hi) {
    for (int64_t k0 = 0; k0 < g.K; k0 += ks.kc) {
      const int64_t kc = std::min(ks.kc, g.K - k0);
      const bool load_c = g.accumulate || k0 > 0;
      T* tail = nullptr;
      if (full < g.M) {
        tail = scratch<T>(kSlotA, tail_mr * kc);
        pack_a(g, ks, tail_mr, full, g.M - full, k0, kc, tail);
      }
      for (int64_t q = lo; q < hi; ++q) {
        const int64_t n0 = q * nr, cols = std::min(nr, g.N - n0);
        const T* b = g.B + k0 * g.b_rs + n0 * g.b_cs;
        int64_t ldb = g.b_rs;
        if (g.b_cs != 1 || cols < nr) {
          T* p = scratch<T>(kSlotB, kc * nr);
          pack_b(g, ks, n0, k0, kc, p);
          b = p, ldb = nr;
        }
        T* c = g.C + n0;
        const T* bias = g.bias ? g.bias + n0 : nullptr;
        for (int64_t m = 0; m < full; m += mr)
          run_tile(ks, kc, g.A + m * g.a_rs + k0 * g.a_cs, g.a_rs, g.a_cs, b, ldb, c + m * g.c_rs, g.c_rs, mr, cols,
                   load_c, bias);
        if (tail)
          run_tile(ks, tail_mr, tail_kernel, kc, tail, 1, tail_mr, b, ldb, c + full * g.c_rs, g.c_rs, g.M - full, cols,
                   load_c, bias);
      }
    }
  });
}

// Brings rows m0 .. m0+rows, columns n0 .. n0+cols of C into cache.
template <class T>
void prefetch_tile(const GemmArgs<T>& g, int64_t m0, int64_t rows, int64_t n0, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; j += 64 / int64_t(sizeof(T))) __builtin_prefetch(g.C + (m0 + r) * g.c_rs + n0 + j, 1);
}

// Packed B for columns p0 * nr .. (p0 + np) * nr and rows s0 .. s0 + sk: slice k0 (kc rows) starts at
// p + k0 * np * nr and holds np panels of kc x nr.
template <class T>
struct Slab {
  const T* p;
  int64_t p0, np, s0, sk;
};

// One job of a packed product: C rows m0 .. m0+rows by the slab's panels q0 .. q1.
template <class T>
void packed_job(const GemmArgs<T>& g, const KernelSet<T>& ks, const Slab<T>& b, int64_t m0, int64_t rows, int64_t q0,
                int64_t q1) {
  const int64_t mr = ks.mr, nr = ks.nr, q_block = ks.nc / nr;
  T* ap = scratch<T>(kSlotA, ceil_div(rows, mr) * mr * ks.kc);
  for (int64_t k0 = 0; k0 < b.sk; k0 += ks.kc) {
    const int64_t kc = std::min(ks.kc, b.sk - k0);
    const bool load_c = g.accumulate || b.s0 + k0 > 0;
    pack_a(g, ks, m0, rows, b.s0 + k0, kc, ap);
    const T* bs = b.p + k0 * b.np * nr;
    // A block of nc columns of the slice stays in L2 while every A panel of the job sweeps it.
    for (int64_t qa = q0; qa < q1; qa += q_block) {
      const int64_t qe = std::min(q1, qa + q_block);
      for (int64_t i = 0; i < rows; i += mr)
        for (int64_t q = qa; q < qe; ++q) {
          // The C rows of the next tile arrive while this one computes, rather than stalling its first FMAs.
          const int64_t n0 = (b.p0 + q) * nr, na = (b.p0 + qa) * nr;
          if (q + 1 < qe)
            prefetch_tile(g, m0 + i, std::min(mr, rows - i), n0 + nr, std::min(nr, g.N - n0 - nr));
          else if (i + mr < rows)
            prefetch_tile(g, m0 + i + mr, std::min(mr, rows - i - mr), na, std::min(nr, g.N - na));
          run_tile(ks, kc, ap + i * kc, 1, mr, bs + q * kc * nr, nr, g.C + (m0 + i) * g.c_rs + n0, g.c_rs,
                   std::min(mr, rows - i), std::min(nr, g.N - n0), load_c, g.bias ? g.bias + n0 : nullptr);
        }
    }
  }
}

template <class T>
void gemm_packed(const GemmArgs<T>& g, const KernelSet<T>& ks, bool threaded) {
  const int64_t mr = ks.mr, nr = ks.nr, m_tiles = ceil_div(g.M, mr), n_panels = ceil_div(g.N, nr);
  // Packed B holds at most kSlabElems (or one kc x nc block): all of B for the usual shapes, else chunks of
  // columns, each in slabs of rows. A slab need not hold whole k slices: 2048³ is one slab of 5 slices of 384
  // rows and one of 128, not a second slab (a second pass over all of C) for the last 128 rows.
  const int64_t chunk = std::min(n_panels, std::max(ks.nc / nr, kSlabElems / (ks.kc * nr)));
  const int64_t slab_rows = std::max(ks.kc, kSlabElems / (chunk * nr));
  T* bp = scratch<T>(kSlotB, std::min(slab_rows, g.K) * chunk * nr);
  // Row blocks of at most mc rows (gemm_detail::row_jobs); column blocks only when the rows run out.
  const int64_t threads = threaded ? num_threads() : 1;
  const int64_t jobs_m = gemm_detail::row_jobs(m_tiles, ks.mc / mr, threads);
  const int64_t jobs_n = threads == 1 ? 1 : std::min(chunk, ceil_div(2 * threads, jobs_m));
  for (int64_t p0 = 0; p0 < n_panels; p0 += chunk)
    for (int64_t s0 = 0; s0 < g.K; s0 += slab_rows) {
      const Slab<T> b{bp, p0, std::min(chunk, n_panels - p0), s0, std::min(slab_rows, g.K - s0)};
      // One parallel region per slab (as in ops/gemm_bf16.cpp): the threads pack B's panels as they claim them,
      // wait until all are packed (packing never waits), then take jobs as they come.
      // Panels go in groups, two per thread (pack_b_panels reads B's rows once per group).
      const int64_t group = ceil_div(b.np, 2 * threads);
      std::atomic<int64_t> next_panel{0}, packed{0}, next_job{0};
      parallel_for(0, threads, 1, [&](int64_t, int64_t) {
        for (int64_t q; (q = next_panel.fetch_add(group)) < b.np;) {
          const int64_t q1 = std::min(b.np, q + group);
          for (int64_t k0 = 0; k0 < b.sk; k0 += ks.kc) {
            const int64_t kc = std::min(ks.kc, b.sk - k0);
            pack_b_panels(g, ks, p0 + q, p0 + q1, s0 + k0, kc, bp + (k0 * b.np + q * kc) * nr);
          }
          packed.fetch_add(q1 - q, std::memory_order_release);
        }
        while (packed.load(std::memory_order_acquire) < b.np) std::this_thread::yield();
        for (int64_t job; (job = next_job.fetch_add(1)) < jobs_m * jobs_n;) {
          const int64_t jm = job / jobs_n, jn = job % jobs_n;
          const int64_t m0 = m_tiles * jm / jobs_m * mr, m1 = std::min(g.M, m_tiles * (jm + 1) / jobs_m * mr);
          packed_job(g, ks, b, m0, m1 - m0, b.np * jn / jobs_n, b.np * (jn + 1) / jobs_n);
        }
      });
    }
}

// Products of up to the kernel set's in_place_work with K and B within its in-place bounds (KernelSet) and at
// least two panels of B (for the threads to share) skip the packing.
template <class T>
bool in_place(const GemmArgs<T>& g, const KernelSet<T>& ks, int64_t work) {
  return work <= ks.in_place_work && g.K <= ks.in_place_kc && g.N > ks.nr &&
         g.K * g.N <= ks.in_place_kc * ks.in_place_nc;
}

template <class T>
void gemm_with(const GemmArgs<T>& g, const KernelSet<T>& ks) {
  if (g.M <= 0 || g.N <= 0) return;
  if (g.K <= 0) {
    if (!g.accumulate) {
      if (g.bias)
        gemm_detail::fill_rows(g.C, g.c_rs, g.M, g.bias, g.N);
      else
        for (int64_t m = 0; m < g.M; ++m) std::fill(g.C + m * g.c_rs, g.C + m * g.c_rs + g.N, T(0));
    }
    return;
  }
  const int64_t work = g.M * g.N * g.K;
  if constexpr (std::is_same_v<T, float>) {
    if (ks.dot_block && g.M > kDotRows && g.M <= kDotBlockRows && g.a_cs == 1 && g.b_rs == 1) {
      gemm_dot_blocks(g, ks.dot_block, work >= kThreadWork / 8);
      return;
    }
  }
  if (g.M <= kDotRows && g.a_cs == 1 && g.b_rs == 1)
    gemm_dots(g, work >= kThreadWork / 32);  // memory-bound: both cores stream W
  else if (work <= kSmallWork || g.M <= 4 * ks.mr || in_place(g, ks, work))
    gemm_small(g, ks, work >= kThreadWork);
  else
    gemm_packed(g, ks, work >= kThreadWork);
}

const gemm_detail::PairKernelSet* pair_kernels_for([[maybe_unused]] SimdLevel level) {
#if defined(__x86_64__)
  if (built_for(SimdLevel::Avx512Bf16) && level >= SimdLevel::Avx512Bf16) {
    static const gemm_detail::PairKernelSet avx512bf16 = gemm_detail::avx512bf16_kernels();
    return &avx512bf16;
  }
#endif
  return nullptr;
}

}  // namespace

template <class T>
void gemm(const GemmArgs<T>& g, SimdLevel level) {
  level = std::min(level, simd_level());
  ENG_CHECK(!(g.bias && g.accumulate), "gemm: a bias starts C, so it cannot be combined with accumulate");
  if constexpr (std::is_same_v<T, float>) {
    if (g.precision == GemmPrecision::Bf16)
      return gemm_detail::gemm_bf16(g, kernels_for<float>(level), pair_kernels_for(level));
  } else {
    ENG_CHECK(g.precision == GemmPrecision::F32, "gemm: a bf16 product takes f32 operands, got f64");
  }
  gemm_with(g, kernels_for<T>(level));
}

template <class T>
void gemm(const GemmArgs<T>& g) {
  gemm(g, simd_level());
}

PackedB pack_b(const GemmArgs<float>& g) {
  PackedB b;
  b.K = g.K, b.N = g.N, b.level = simd_level();
  const KernelSet<float>& ks = kernels_for<float>(b.level);
  const int64_t nr = ks.nr, np = ceil_div(g.N, nr);
  b.panels.resize(size_t(g.K * np * nr));
  for (int64_t k0 = 0; k0 < g.K; k0 += ks.kc) {
    const int64_t kc = std::min(ks.kc, g.K - k0);
    pack_b_panels(g, ks, 0, np, k0, kc, b.panels.data() + k0 * np * nr);
  }
  return b;
}

// M rows as `tall` tiles of ks.mr rows, then `short_` tiles of ks.mr_short: the fewest rows computed (padding
// included), then the fewest tiles. The last tile may be partial.
struct RowTiles {
  int64_t tall = 0, short_ = 0;
};
RowTiles row_tiles(int64_t M, const KernelSet<float>& ks) {
  const int64_t most = ceil_div(M, ks.mr);
  RowTiles best{most, 0};
  int64_t best_rows = most * ks.mr;
  for (int64_t n = 0; n < most && ks.mr_short > 0; ++n) {
    const int64_t s = ceil_div(M - n * ks.mr, ks.mr_short), rows = n * ks.mr + s * ks.mr_short;
    if (rows < best_rows || (rows == best_rows && n + s < best.tall + best.short_)) best = {n, s}, best_rows = rows;
  }
  return best;
}

// gemm_small with B's panels ready: A read in place or packed once (a few rows, in tiles of both heights, every k
// slice), then the panels split over the threads.
void gemm(const GemmArgs<float>& g, const PackedB& b, RowMap then) {
  ENG_CHECK(b.K == g.K && b.N == g.N, "gemm: packed B is ", b.K, " x ", b.N, ", the product needs ", g.K, " x ", g.N);
  if (g.precision != GemmPrecision::F32 || g.M <= kDotRows || b.level != simd_level() || g.K <= 0) {
    gemm(g);
    for (int64_t m = 0; m < g.M && then; ++m) then(g.C + m * g.c_rs, g.C + m * g.c_rs, g.N);
    return;
  }
  const KernelSet<float>& ks = kernels_for<float>(b.level);
  const int64_t nr = ks.nr, np = ceil_div(g.N, nr);
  const RowTiles t = row_tiles(g.M, ks);
  const int64_t tall_rows = std::min(g.M, t.tall * ks.mr), padded = t.tall * ks.mr + t.short_ * ks.mr_short;
  // Rows along k that fill every tile are read in place: the tile broadcasts from its mr rows as from a panel, and
  // the packing, which the calling thread ran alone before the threads' jobs, goes (M = 32, 8 layers' weights,
  // 1 thread: 119-124 -> 128-133 GF/s in CPU time, 5 alternating pairs). Else A is packed once (slice k0 at
  // ap + padded * k0: the tall panels, then the short), its padding rows zero.
  const bool in_place = g.a_cs == 1 && padded == g.M;
  float* ap = in_place ? nullptr : scratch<float>(kSlotA, padded * g.K);
  for (int64_t k0 = 0; k0 < g.K && !in_place; k0 += ks.kc) {
    const int64_t kc = std::min(ks.kc, g.K - k0);
    pack_a(g, ks, ks.mr, 0, tall_rows, k0, kc, ap + padded * k0);
    if (t.short_) pack_a(g, ks, ks.mr_short, tall_rows, g.M - tall_rows, k0, kc, ap + padded * k0 + tall_rows * kc);
  }
  parallel_for(0, np, g.M * g.N * g.K >= kThreadWork ? 1 : np, [&](int64_t lo, int64_t hi) {
    for (int64_t k0 = 0; k0 < g.K; k0 += ks.kc) {
      const int64_t kc = std::min(ks.kc, g.K - k0);
      for (int64_t q = lo; q < hi; ++q) {
        const int64_t n0 = q * nr;
        for (int64_t m = 0; m < g.M;) {
          const bool tall = m < tall_rows;
          const int64_t mr = tall ? ks.mr : ks.mr_short;
          const float* a = in_place ? g.A + m * g.a_rs + k0 : ap + padded * k0 + m * kc;
          run_tile(ks, mr, tall ? ks.kernel : ks.kernel_short, kc, a, in_place ? g.a_rs : 1, in_place ? 1 : mr,
                   b.panels.data() + (k0 * np + q * kc) * nr, nr, g.C + m * g.c_rs + n0, g.c_rs,
                   std::min(mr, g.M - m), std::min(nr, g.N - n0), g.accumulate || k0 > 0,
                   g.bias ? g.bias + n0 : nullptr);
          m += mr;
        }
      }
    }
    const int64_t n0 = lo * nr, n1 = std::min(g.N, hi * nr);
    for (int64_t m = 0; m < g.M && then; ++m) then(g.C + m * g.c_rs + n0, g.C + m * g.c_rs + n0, n1 - n0);
  });
}

template void gemm_reference<float>(const GemmArgs<float>&);
template void gemm_reference<double>(const GemmArgs<double>&);
template void gemm<float>(const GemmArgs<float>&);
template void gemm<double>(const GemmArgs<double>&);
template void gemm<float>(const GemmArgs<float>&, SimdLevel);
template void gemm<double>(const GemmArgs<double>&, SimdLevel);

}  // namespace eng
