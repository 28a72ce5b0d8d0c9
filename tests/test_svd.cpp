// The one-sided Jacobi SVD (ops/svd.h): known singular values, reconstruction of random matrices, orthonormal
// factors, wide and tall shapes, rank deficiency, and its errors.
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "ops/svd.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;

namespace {

// max |U diag(s) Vᵀ − A| and the largest deviation of UᵀU and VᵀV from the identity (over columns with s > 0).
void check_factors(const Tensor& a, const SvdResult& r, double tol) {
  const int64_t m = r.rows, n = r.cols, k = r.rank;
  double err = 0, orth = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double x = 0;
      for (int64_t p = 0; p < k; ++p) x += r.u[size_t(i * k + p)] * r.s[size_t(p)] * r.v[size_t(j * k + p)];
      err = std::max(err, std::abs(x - a.at({i, j})));
    }
  auto gram = [&](const std::vector<double>& f, int64_t rows) {
    for (int64_t p = 0; p < k; ++p)
      for (int64_t q = 0; q < k; ++q) {
        if (r.s[size_t(p)] == 0 || r.s[size_t(q)] == 0) continue;
        double x = 0;
        for (int64_t i = 0; i < rows; ++i) x += f[size_t(i * k + p)] * f[size_t(i * k + q)];
        orth = std::max(orth, std::abs(x - (p == q ? 1.0 : 0.0)));
      }
  };
  gram(r.u, m);
  gram(r.v, n);
  CHECK(err < tol);
  CHECK(orth < tol);
  for (int64_t p = 0; p + 1 < k; ++p) CHECK(r.s[size_t(p)] >= r.s[size_t(p + 1)]);
}

}  // namespace

TEST_CASE("svd: known singular values") {
  // [[3, 0], [4, 5]]: AᵀA = [[25, 20], [20, 25]] has eigenvalues 45 and 5.
  SvdResult r = svd(from_vector(std::vector<double>{3, 0, 4, 5}, {2, 2}, DType::F64));
  CHECK(r.s[0] == doctest::Approx(std::sqrt(45.0)).epsilon(1e-15));
  CHECK(r.s[1] == doctest::Approx(std::sqrt(5.0)).epsilon(1e-15));
  // a diagonal matrix with permuted, negative entries: |d| sorted
  r = svd(from_vector(std::vector<double>{0, 0, -2, 7, 0, 0, 0, 0.5, 0}, {3, 3}, DType::F64));
  CHECK(r.s == std::vector<double>{7, 2, 0.5});
  // rank one: u vᵀ has σ1 = ‖u‖ ‖v‖ and the rest 0
  std::vector<double> uv;
  for (double x : {1.0, 2.0, 2.0})
    for (double y : {3.0, 4.0}) uv.push_back(x * y);
  r = svd(from_vector(uv, {3, 2}, DType::F64));
  CHECK(r.s[0] == doctest::Approx(15.0).epsilon(1e-14));
  CHECK(std::abs(r.s[1]) < 1e-13);
}

TEST_CASE("svd: random tall, wide and square matrices are reconstructed with orthonormal factors") {
  for (const Shape& shape : {Shape{7, 4}, Shape{4, 7}, Shape{16, 16}, Shape{1, 5}, Shape{5, 1}, Shape{64, 48}}) {
    INFO(shape_str(shape));
    const Tensor a = eng::test::uniform(shape, uint64_t(shape[0] * 100 + shape[1]), -1, 1);
    const SvdResult r = svd(a);
    CHECK(r.rank == std::min(shape[0], shape[1]));
    check_factors(a, r, 1e-12);
    // f32 input, the same decomposition up to the input's rounding
    check_factors(a.to(DType::F32).to(DType::F64), svd(a.to(DType::F32)), 1e-5);
  }
  // a strided view (a transpose) is read through its strides
  const Tensor b = eng::test::uniform({5, 3}, 9);
  const SvdResult r1 = svd(b), r2 = svd(transpose(b, 0, 1));
  for (size_t i = 0; i < r1.s.size(); ++i) CHECK(r1.s[i] == doctest::Approx(r2.s[i]).epsilon(1e-13));
}

TEST_CASE("svd: a singular matrix, the zero matrix, and bad input") {
  // column 2 = column 0 + column 1: rank 2
  const std::vector<double> x{1, 2, 3, 4, 5, 9, 7, 8, 15, 1, 0, 1};
  const Tensor a = from_vector(x, {4, 3}, DType::F64);
  const SvdResult r = svd(a);
  CHECK(r.s[2] < 1e-13);
  check_factors(a, r, 1e-12);
  CHECK(svd(zeros({3, 2}, DType::F64)).s == std::vector<double>{0, 0});
  CHECK_THROWS_WITH(svd(zeros({2, 2, 2})), "svd: expected a matrix [rows, cols], got [2, 2, 2]");
  CHECK_THROWS_WITH(svd(from_vector(std::vector<double>{1, NAN}, {1, 2}, DType::F64)),
                    "svd: the matrix [1, 2] holds a non-finite entry");
}
