#include "ops/svd.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/error.h"
#include "ops/view.h"

namespace eng {

namespace {

// One-sided Jacobi on the columns of w [m, n] (row-major, m >= n), accumulating the rotations in vt [n, n].
int jacobi_columns(std::vector<double>& w, std::vector<double>& vt, int64_t m, int64_t n) {
  constexpr double kTol = 1e-15;  // relative: columns i, j count as orthogonal when |w_i·w_j| <= tol ‖w_i‖‖w_j‖
  constexpr int kMaxSweeps = 60;
  for (int sweep = 1; sweep <= kMaxSweeps; ++sweep) {
    bool rotated = false;
    for (int64_t i = 0; i < n - 1; ++i)
      for (int64_t j = i + 1; j < n; ++j) {
        double alpha = 0, beta = 0, gamma = 0;  // ‖w_i‖², ‖w_j‖², w_i·w_j
        for (int64_t r = 0; r < m; ++r) {
          const double a = w[size_t(r * n + i)], b = w[size_t(r * n + j)];
          alpha += a * a, beta += b * b, gamma += a * b;
        }
        if (std::abs(gamma) <= kTol * std::sqrt(alpha * beta) || gamma == 0) continue;
        rotated = true;
        // The rotation that zeroes the (i, j) entry of WᵀW (the symmetric Schur step, Golub & Van Loan §8.5.2).
        const double zeta = (beta - alpha) / (2 * gamma);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::abs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), s = c * t;
        for (int64_t r = 0; r < m; ++r) {
          const double a = w[size_t(r * n + i)], b = w[size_t(r * n + j)];
          w[size_t(r * n + i)] = c * a - s * b;
          w[size_t(r * n + j)] = s * a + c * b;
        }
        for (int64_t r = 0; r < n; ++r) {
          const double a = vt[size_t(r * n + i)], b = vt[size_t(r * n + j)];
          vt[size_t(r * n + i)] = c * a - s * b;
          vt[size_t(r * n + j)] = s * a + c * b;
        }
      }
    if (!rotated) return sweep;
  }
  fail("svd: one-sided Jacobi did not converge in ", kMaxSweeps, " sweeps");
}

}  // namespace

SvdResult svd(const Tensor& a) {
  ENG_CHECK(a.dim() == 2, "svd: expected a matrix [rows, cols], got ", a.shape());
  const bool tall = a.size(0) >= a.size(1);
  // Work on the tall orientation; a wide matrix is decomposed as its transpose with U and V swapped.
  const Tensor t = (tall ? a : transpose(a, 0, 1)).contiguous().to(DType::F64);
  const int64_t m = t.size(0), n = t.size(1);
  std::vector<double> w = t.to_vector();
  for (double x : w) ENG_CHECK(std::isfinite(x), "svd: the matrix ", a.shape(), " holds a non-finite entry");
  std::vector<double> vt(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) vt[size_t(i * n + i)] = 1;
  SvdResult r;
  r.sweeps = n > 1 ? jacobi_columns(w, vt, m, n) : 1;
  std::vector<double> norms(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    double ss = 0;
    for (int64_t i = 0; i < m; ++i) ss += w[size_t(i * n + j)] * w[size_t(i * n + j)];
    norms[size_t(j)] = std::sqrt(ss);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return norms[size_t(x)] > norms[size_t(y)]; });
  std::vector<double> left(size_t(m * n)), right(size_t(n * n));
  r.s.resize(size_t(n));
  for (int64_t k = 0; k < n; ++k) {
    const int64_t j = order[size_t(k)];
    const double sigma = norms[size_t(j)];
    r.s[size_t(k)] = sigma;
    for (int64_t i = 0; i < m; ++i) left[size_t(i * n + k)] = sigma > 0 ? w[size_t(i * n + j)] / sigma : 0;
    for (int64_t i = 0; i < n; ++i) right[size_t(i * n + k)] = vt[size_t(i * n + j)];
  }
  r.rank = n;
  r.rows = a.size(0), r.cols = a.size(1);
  r.u = tall ? std::move(left) : std::move(right);
  r.v = tall ? std::move(right) : std::move(left);
  return r;
}

}  // namespace eng
