// `axial`: == softmax attention under the dense mask "same row" or "same column" of the raster-order image, per
// head or for all heads.
#include <doctest/doctest.h>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

namespace {

// axis: 0 rows, 1 columns, 2 per head (even heads rows, odd heads columns)
DenseRule axial_rule(int64_t W, int axis, bool causal) {
  return [=](int64_t h, int64_t i, int64_t j) {
    const bool rows = axis == 0 || (axis == 2 && h % 2 == 0);
    return (rows ? i / W == j / W : i % W == j % W) && (!causal || j <= i);
  };
}

}  // namespace

TEST_CASE("axial == softmax attention with the dense row / column mask, causal and not") {
  const char* axes[] = {"rows", "columns", "heads"};
  for (bool causal : {false, true})
    for (int axis = 0; axis < 3; ++axis) {
      check_sparse_pattern({"axial", {{"axis", axes[axis]}, {"block", "8"}}, 2, 64, causal},
                           axial_rule(8, axis, causal));
      check_sparse_pattern({"axial", {{"axis", axes[axis]}, {"width", "6"}, {"block", "5"}}, 3, 57, causal},
                           axial_rule(6, axis, causal));
      check_sparse_pattern({"axial", {{"axis", axes[axis]}, {"width", "7"}}, 2, 150, causal},
                           axial_rule(7, axis, causal));
    }
}

TEST_CASE("axial: peak memory at N = 16384 (128 x 128) below an N x N buffer") {
  check_sparse_memory({"axial", {{"block", "16"}}, 2, 16384, true});
}

TEST_CASE("axial: options and errors") {
  CHECK_THROWS_WITH(make_sparse_variant({"axial", {{"axis", "depth"}}, 2, 0, false}),
                    "attention 'axial': option axis must be heads, rows or columns, got 'depth'");
  CHECK_THROWS_WITH(make_sparse_variant({"axial", {}, 1, 0, false}),
                    "attention 'axial': axis=heads needs at least 2 heads, the model has 1; use axis=rows or "
                    "axis=columns");
}
