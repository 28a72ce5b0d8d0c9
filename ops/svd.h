// Singular value decomposition of a small dense matrix by one-sided Jacobi (Hestenes 1958): plane rotations
// applied to pairs of columns until every pair is orthogonal; the column norms are then the singular values.
// It is accurate to a few ulps of the largest singular value and needs no bidiagonalisation, which suits the
// matrices it is used on (attention maps of a few hundred rows, `bench spectrum`). Not differentiable.
// Cost: O(sweeps · m · n²) time (typically 6–10 sweeps), O(m·n + n²) memory.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace eng {

struct SvdResult {
  int64_t rows = 0, cols = 0, rank = 0;  // rank = min(rows, cols)
  std::vector<double> s;  // [rank], descending, >= 0
  std::vector<double> u;  // [rows, rank], row-major, orthonormal columns (for s > 0)
  std::vector<double> v;  // [cols, rank], row-major, orthonormal columns
  int sweeps = 0;         // Jacobi sweeps until convergence
};

// a: [rows, cols] (any floating dtype, any strides). Throws for another rank or a non-finite entry.
SvdResult svd(const Tensor& a);

}  // namespace eng
