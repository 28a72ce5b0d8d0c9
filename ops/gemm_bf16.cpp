// The bf16 GEMM (ops/gemm.h): the reference that defines its bits, and the driver. Both operands are packed
// as bf16 one k slice at a time, B first (shared by all jobs), then A per job of rows, and register tiles run
// over the panels: pairs for vdpbf16ps, or rounded f32 panels for the f32 kernels. Either way each C element is
// the reference's chain, continued from one k slice to the next (slices hold whole pairs), so neither the
// kernel level, the slicing nor the thread split changes a bit.
#include <algorithm>
#include <atomic>
#include <thread>

#include "engine/threadpool.h"
#include "ops/bf16.h"
#include "ops/gemm.h"
#include "ops/gemm_kernels.h"

namespace eng {

void gemm_bf16_reference(const GemmArgs<float>& g) {
  auto a = [&](int64_t m, int64_t k) { return bf16_round(g.A[m * g.a_rs + k * g.a_cs]); };
  auto b = [&](int64_t k, int64_t n) { return bf16_round(g.B[k * g.b_rs + n * g.b_cs]); };
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t n = 0; n < g.N; ++n) {
      float* c = &g.C[m * g.c_rs + n];
      float acc = g.accumulate ? *c : g.bias ? g.bias[n] : 0.f;
      for (int64_t k = 0; k < g.K; k += 2) {
        acc = acc + (k + 1 < g.K ? a(m, k + 1) * b(k + 1, n) : 0.f);
        acc = acc + a(m, k) * b(k, n);
      }
      *c = acc;
    }
}

namespace gemm_detail {
namespace {

constexpr int64_t kMaxTile = 16 * 32;             // largest mr x nr of any kernel set
constexpr int64_t kSlabElems = int64_t(1) << 22;  // one k slice of packed B: 16 MiB at most
constexpr int64_t kThreadWork = int64_t(1) << 21;  // M·N·K from this on is split over threads

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// vdpbf16ps on pair panels: a k slice of kc is (kc + 1) / 2 panel rows. A as stored (rows along k) goes into
// row-major panels (pack_rows, kernel_rows: no transpose), any other A and B into k-major ones.
struct PairPath {
  using P = uint32_t;
  const PairKernelSet& ks;
  bool rows_a;
  int64_t mr() const { return ks.mr; }
  int64_t nr() const { return ks.nr; }
  int64_t kc() const { return ks.kc; }
  int64_t nc() const { return ks.nc; }
  int64_t mc() const { return ks.mc; }
  static int64_t depth(int64_t kc) { return (kc + 1) / 2; }
  void pack(const float* src, int64_t rs, int64_t cs, int64_t rows, int64_t width, int64_t kc, P* dst) const {
    ks.pack(src, rs, cs, rows, width, kc, dst);
  }
  void pack_a(const float* src, int64_t rs, int64_t cs, int64_t rows, int64_t width, int64_t kc, P* dst) const {
    (rows_a ? ks.pack_rows : ks.pack)(src, rs, cs, rows, width, kc, dst);
  }
  void kernel(int64_t kc, const P* a, const P* b, float* c, int64_t ldc, bool load_c, const float* bias) const {
    (rows_a ? ks.kernel_rows : ks.kernel)(depth(kc), a, b, c, ldc, load_c, bias);
  }
};

// The f32 kernels on k-major panels (element (r, k) at dst[k * width + r]) of rounded values, each pair stored
// odd element first and a zero after an odd kc: the f32 chain then adds a[k+1] b[k+1] before a[k] b[k], both
// exact, as vdpbf16ps does. Fused or not, a multiply-add of exact products rounds once.
struct RoundedPath {
  using P = float;
  const KernelSet<float>& ks;
  int64_t mr() const { return ks.mr; }
  int64_t nr() const { return ks.nr; }
  int64_t kc() const { return ks.kc / 2 * 2; }
  int64_t nc() const { return ks.nc; }
  int64_t mc() const { return ks.mc; }
  static int64_t depth(int64_t kc) { return (kc + 1) / 2 * 2; }
  // Panels of `width` rows as PairPackFn lays them out (ops/gemm_kernels.h).
  void pack(const float* src, int64_t rs, int64_t cs, int64_t rows, int64_t width, int64_t kc, P* dst) const {
    for (int64_t r0 = 0; r0 < rows; r0 += width, dst += depth(kc) * width)
      for (int64_t k = 0; k < depth(kc); ++k) {
        const int64_t from = k ^ 1;  // 1, 0, 3, 2, ...
        for (int64_t r = 0; r < width; ++r)
          dst[k * width + r] = r0 + r < rows && from < kc ? bf16_round(src[(r0 + r) * rs + from * cs]) : 0.f;
      }
  }
  void pack_a(const float* src, int64_t rs, int64_t cs, int64_t rows, int64_t width, int64_t kc, P* dst) const {
    pack(src, rs, cs, rows, width, kc, dst);
  }
  void kernel(int64_t kc, const P* a, const P* b, float* c, int64_t ldc, bool load_c, const float* bias) const {
    if (bias && !load_c) fill_rows(c, ldc, ks.mr, bias, ks.nr), load_c = true;
    ks.kernel(depth(kc), a, 1, ks.mr, b, ks.nr, c, ldc, load_c);
  }
};

// One tile of C whose valid part is rows x cols; an edge tile goes through a padded copy. With `bias` (the tile's
// first column of it) and no C to load, the tile starts from the bias rows (a full tile from the bias itself:
// the pair kernel starts its accumulators there, and writes C once).
template <class Path>
void run_tile(const Path& path, int64_t kc, const typename Path::P* a, const typename Path::P* b, float* c,
              int64_t ldc, int64_t rows, int64_t cols, bool load_c, const float* bias) {
  const int64_t nr = path.nr();
  if (rows == path.mr() && cols == nr) {
    path.kernel(kc, a, b, c, ldc, load_c, load_c ? nullptr : bias);
    return;
  }
  alignas(64) float tmp[kMaxTile] = {};
  if (load_c)
    for (int64_t r = 0; r < rows; ++r) std::copy(c + r * ldc, c + r * ldc + cols, tmp + r * nr);
  else if (bias)
    fill_rows(tmp, nr, rows, bias, cols), load_c = true;
  path.kernel(kc, a, b, tmp, nr, load_c, nullptr);
  for (int64_t r = 0; r < rows; ++r) std::copy(tmp + r * nr, tmp + r * nr + cols, c + r * ldc);
}

// C rows m0 .. m0+rows by packed-B panels q0 .. q1 (of a chunk starting at panel p0), for one k slice.
template <class Path>
void job(const GemmArgs<float>& g, const Path& path, const typename Path::P* bp, int64_t p0, int64_t m0, int64_t rows,
         int64_t q0, int64_t q1, int64_t k0, int64_t kc) {
  using P = typename Path::P;
  const int64_t mr = path.mr(), nr = path.nr(), depth = Path::depth(kc), q_block = std::max<int64_t>(1, path.nc() / nr);
  const bool load_c = g.accumulate || k0 > 0;
  P* ap = scratch<P>(kSlotA, ceil_div(rows, mr) * mr * depth);
  path.pack_a(g.A + m0 * g.a_rs + k0 * g.a_cs, g.a_rs, g.a_cs, rows, mr, kc, ap);
  // A block of nc columns of the slice stays in L2 while every A panel of the job sweeps it.
  for (int64_t qa = q0; qa < q1; qa += q_block)
    for (int64_t i = 0; i < rows; i += mr)
      for (int64_t q = qa; q < std::min(q1, qa + q_block); ++q) {
        const int64_t n0 = (p0 + q) * nr;
        run_tile(path, kc, ap + i * depth, bp + q * depth * nr, g.C + (m0 + i) * g.c_rs + n0, g.c_rs,
                 std::min(mr, rows - i), std::min(nr, g.N - n0), load_c, g.bias ? g.bias + n0 : nullptr);
      }
}

template <class Path>
void drive(const GemmArgs<float>& g, const Path& path, bool threaded) {
  using P = typename Path::P;
  const int64_t mr = path.mr(), nr = path.nr(), m_tiles = ceil_div(g.M, mr), n_panels = ceil_div(g.N, nr);
  const int64_t depth_max = Path::depth(std::min(path.kc(), g.K));
  // Columns in chunks whose packed slice fits kSlabElems (all of B's columns for the usual shapes).
  const int64_t chunk = std::min(n_panels, std::max(path.nc() / nr, kSlabElems / (depth_max * nr)));
  // Row blocks of at most mc rows (row_jobs); column blocks only when the rows run out.
  const int64_t threads = threaded ? num_threads() : 1;
  const int64_t jobs_m = row_jobs(m_tiles, path.mc() / mr, threads);
  const int64_t jobs_n = threads == 1 ? 1 : std::min(chunk, ceil_div(2 * threads, jobs_m));
  P* bp = scratch<P>(kSlotB, chunk * depth_max * nr);
  for (int64_t p0 = 0; p0 < n_panels; p0 += chunk) {
    const int64_t np = std::min(chunk, n_panels - p0);
    for (int64_t k0 = 0; k0 < g.K; k0 += path.kc()) {
      const int64_t kc = std::min(path.kc(), g.K - k0), depth = Path::depth(kc);
      // One parallel region per slice, not one to pack B and one for the jobs: each wake-up of the pool costs
      // 5-15 us, a tenth of a 256³ product on two threads. The threads pack B's panels as they claim them, wait
      // (briefly: packing never waits) until all are packed, then take jobs as they come. A thread the pool has
      // not woken yet finds the work done, so no one waits on a thread that is not running.
      // Panels go in groups, two per thread: one pack call reads each line of B once for a whole group.
      const int64_t group = ceil_div(np, 2 * threads);
      std::atomic<int64_t> next_panel{0}, packed{0}, next_job{0};
      parallel_for(0, threads, 1, [&](int64_t, int64_t) {
        for (int64_t q; (q = next_panel.fetch_add(group)) < np;) {
          const int64_t n0 = (p0 + q) * nr, q1 = std::min(np, q + group);
          path.pack(g.B + k0 * g.b_rs + n0 * g.b_cs, g.b_cs, g.b_rs, std::min((q1 - q) * nr, g.N - n0), nr, kc,
                    bp + q * depth * nr);
          packed.fetch_add(q1 - q, std::memory_order_release);
        }
        while (packed.load(std::memory_order_acquire) < np) std::this_thread::yield();
        for (int64_t j; (j = next_job.fetch_add(1)) < jobs_m * jobs_n;) {
          const int64_t jm = j / jobs_n, jn = j % jobs_n;
          const int64_t m0 = m_tiles * jm / jobs_m * mr, m1 = std::min(g.M, m_tiles * (jm + 1) / jobs_m * mr);
          if (m1 > m0) job(g, path, bp, p0, m0, m1 - m0, np * jn / jobs_n, np * (jn + 1) / jobs_n, k0, kc);
        }
      });
    }
  }
}

}  // namespace

void gemm_bf16(const GemmArgs<float>& g, const KernelSet<float>& f32, const PairKernelSet* pairs) {
  if (g.M <= 0 || g.N <= 0) return;
  if (g.K <= 0) {
    if (g.accumulate) return;
    if (g.bias)
      fill_rows(g.C, g.c_rs, g.M, g.bias, g.N);
    else
      for (int64_t m = 0; m < g.M; ++m) std::fill(g.C + m * g.c_rs, g.C + m * g.c_rs + g.N, 0.f);
    return;
  }
  const bool threaded = g.M * g.N * g.K >= kThreadWork;
  if (pairs)
    drive(g, PairPath{*pairs, g.a_cs == 1 && pairs->pack_rows}, threaded);
  else
    drive(g, RoundedPath{f32}, threaded);
}

}  // namespace gemm_detail
}  // namespace eng
