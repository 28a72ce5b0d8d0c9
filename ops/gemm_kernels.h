// Internal to the GEMM: the register-tile micro-kernels the driver in ops/gemm.cpp runs, one set per
// instruction-set level (ops/gemm_kernels_avx512.cpp, ops/gemm_kernels_avx2.cpp; the portable one is in
// gemm.cpp), with the cache blocking that suits each.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "ops/gemm.h"

namespace eng::gemm_detail {

// c[mr x nr] (row stride ldc) = (load_c ? c : 0) + a · b over k in 0..K, where a(r, k) = a[r * a_rs + k * a_cs]
// and row k of b is the nr values at b + k * ldb. Every element is one multiply-add chain in k order,
// starting from c or 0: the driver relies on this to give equal bits however it splits the work.
// Packed A panels are passed as a_rs = 1, a_cs = mr, and kernels specialise that case.
template <class T>
using MicroKernel = void (*)(int64_t K, const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t ldb, T* c,
                             int64_t ldc, bool load_c);

// dst[k * ld + r] = (r < rows ? src[r * rs + k] : 0) for k < kc, r < width, rows <= width <= transpose_rows
// (KernelSet): packs a few rows that run along k (A as stored, B transposed) into a k-major panel, zero-padding
// the missing rows.
template <class T>
using TransposeFn = void (*)(const T* src, int64_t rs, int64_t rows, int64_t width, int64_t kc, T* dst, int64_t ld);

// c[r * ldc + j] = (load_c ? c[r * ldc + j] : 0) + Σ_k a[r * a_rs + k] · b[j * b_cs + k] for r < rows <= kDotMr,
// j < cols <= kDotNr: dot products over memory as stored, for C = A·Bᵀ with few rows (a Linear layer's weight
// read in place, no packing). Each element is the same arithmetic whatever rows and cols are, so that the
// split of C into blocks never changes a bit.
constexpr int64_t kDotMr = 3, kDotNr = 4;
using DotBlockFn = void (*)(int64_t K, const float* a, int64_t a_rs, int64_t rows, const float* b, int64_t b_cs,
                            int64_t cols, float* c, int64_t ldc, bool load_c);

template <class T>
struct KernelSet {
  int64_t mr = 0, nr = 0;  // register tile
  int64_t kc = 0;          // k slice: an mr x kc panel of A stays in L1
  int64_t nc = 0;          // columns of packed B swept per A panel: kc x nc stays in L2
  int64_t mc = 0;          // rows of A per job (a multiple of mr)
  // Products of up to this many multiply-adds, K <= in_place_kc and B of at most in_place_kc x in_place_nc read A
  // and B as stored (ops/gemm.cpp: gemm_small): while both sit in L2, packing them costs more than it saves.
  int64_t in_place_work = 0, in_place_kc = 0, in_place_nc = 0;
  MicroKernel<T> kernel = nullptr;
  // A tile of fewer rows on the same B panels (0: none), for products of a few rows (gemm with PackedB): their rows
  // split into tiles of mr and mr_short rows with the fewest padding rows (32 = 4 x 8 on AVX-512, not 14 + 14 + 4).
  // The small-product path runs its last rows on it when they fit (64 = 4 x 14 + 8).
  int64_t mr_short = 0;
  MicroKernel<T> kernel_short = nullptr;
  TransposeFn<T> transpose = nullptr;
  int64_t transpose_rows = 8;  // the most rows one transpose call takes
  DotBlockFn dot_block = nullptr;  // the f32 AVX2 set only; elsewhere such products take the packed path
};

// The bf16 kernels (AVX512_BF16). Panels hold pairs: element (r, p) of a panel is a uint32 with bf16(x(r, 2p))
// in its low half and bf16(x(r, 2p + 1)) in its high half, stored at dst[p * width + r] (zeros past K and past
// `rows`). pair_kernel updates c[mr x nr] (+)= over `pairs` pairs, each lane by vdpbf16ps: the chain of
// gemm_bf16_reference, started from c (load_c), else from bias[0, nr) on every row (non-null), else from zero.
// pack writes the panels of src (element (r, k) at src[r * rs + k * cs]) for k < kc, rounding by bf16_from_f32:
// ceil(rows / width) panels of `width` rows, panel i at dst + i * width * (kc + 1) / 2, so that one call reads
// each source line once whichever axis is contiguous.
// pack_rows and kernel_rows: the same for A as stored (cs == 1), with each panel row-major instead (element (r, p)
// at dst[r * depth + p], depth = (kc + 1) / 2, rows past `rows` zero): a row's pairs are its values in order, so
// packing converts them without a transpose; kernel_rows reads row r of its panel at a + r * pairs.
using PairKernel = void (*)(int64_t pairs, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool load_c,
                            const float* bias);
using PairPackFn = void (*)(const float* src, int64_t rs, int64_t cs, int64_t rows, int64_t width, int64_t kc,
                            uint32_t* dst);

struct PairKernelSet {
  int64_t mr = 0, nr = 0, kc = 0, nc = 0, mc = 0;  // as in KernelSet; kc even, counted in k (not pairs)
  PairKernel kernel = nullptr;
  PairPackFn pack = nullptr;
  PairKernel kernel_rows = nullptr;
  PairPackFn pack_rows = nullptr;
};

// The bf16 driver (ops/gemm_bf16.cpp): with `pairs` (AVX512_BF16), or with the f32 kernels `f32` on panels of
// rounded values whose pairs are stored odd element first, so the f32 chain adds the same terms in the same order.
void gemm_bf16(const GemmArgs<float>& g, const KernelSet<float>& f32, const PairKernelSet* pairs);

// Row blocks (jobs) of C for `threads` threads taking them as they come: blocks of at most tiles_per_job register
// tiles, at least two per thread so that a thread slowed by other work hands its share to the others, and a
// multiple of the thread count, so that no thread is left running the last block alone (11 blocks on 2 threads
// leave one idle for a twelfth of the product).
inline int64_t row_jobs(int64_t m_tiles, int64_t tiles_per_job, int64_t threads) {
  const int64_t jobs = std::max((m_tiles + tiles_per_job - 1) / tiles_per_job, 2 * threads);
  return std::min(m_tiles, (jobs + threads - 1) / threads * threads);
}

// c[r * ldc + j] = bias[j] for r < rows, j < cols: a tile's start when the product has a bias (ops/gemm.h).
template <class T>
void fill_rows(T* c, int64_t ldc, int64_t rows, const T* bias, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) c[r * ldc + j] = bias[j];
}

// A packing buffer of `bytes` (ops/gemm.cpp), 64-byte aligned; from 2 MiB on, aligned to 2 MiB and asked for
// transparent huge pages, so that streaming a packed B block crosses no 4 KiB page (where the hardware prefetchers
// stop and the L1 TLB misses). Freed by std::free.
void* scratch_block(size_t bytes);

// Packing buffers live as long as their thread and only grow: the first touch of a fresh page costs
// ~12 us on these machines, more than packing the page's worth of data.
enum Slot { kSlotB, kSlotA, kSlots };

template <class T>
T* scratch(Slot slot, int64_t n) {
  struct Buf {
    T* p = nullptr;
    int64_t cap = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf bufs[kSlots];
  Buf& b = bufs[slot];
  if (n > b.cap) {
    std::free(b.p);
    b.p = nullptr, b.cap = 0;
    b.p = static_cast<T*>(scratch_block(size_t(n) * sizeof(T)));
    b.cap = n;
  }
  return b.p;
}

#if defined(__x86_64__)
PairKernelSet avx512bf16_kernels();
KernelSet<float> avx512_kernels();
KernelSet<float> avx2_kernels();
// With AVX2 (so for the AVX-512 set too): 8 x 8 in-register transposes, for widths 8 and 6.
void transpose_avx2(const float* src, int64_t rs, int64_t rows, int64_t width, int64_t kc, float* dst, int64_t ld);
// The AVX2 set's (not the AVX-512 set's): each element is eight lane sums over k in steps of 8, added as
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), then the k tail in order.
void dot_block_avx2(int64_t K, const float* a, int64_t a_rs, int64_t rows, const float* b, int64_t b_cs, int64_t cols,
                    float* c, int64_t ldc, bool load_c);
#endif

}  // namespace eng::gemm_detail
