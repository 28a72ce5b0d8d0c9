// `image-2d`: == softmax attention under the dense mask of 2D query blocks and their memory blocks, with pixels
// in raster order.
#include <doctest/doctest.h>

#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

namespace {

// query blocks qh x qw; memory extends mh rows above (and below when not causal) and mw columns on each side
DenseRule image_rule(int64_t W, int64_t qh, int64_t qw, int64_t mh, int64_t mw, bool causal) {
  return [=](int64_t, int64_t i, int64_t j) {
    const int64_t top = i / W / qh * qh, left = i % W / qw * qw, r = j / W, c = j % W;
    const int64_t last_row = causal ? top + qh - 1 : top + qh - 1 + mh;
    return r >= top - mh && r <= last_row && c >= left - mw && c <= left + qw - 1 + mw && (!causal || j <= i);
  };
}

}  // namespace

TEST_CASE("image-2d == softmax attention with the dense 2D local mask, causal and not") {
  for (bool causal : {false, true}) {
    // a square 8 x 8 image (the default width), 2 x 3 query blocks
    check_sparse_pattern(
        {"image-2d",
         {{"query_rows", "2"}, {"query_cols", "3"}, {"memory_rows", "1"}, {"memory_cols", "2"}, {"block", "8"}},
         2,
         64,
         causal},
        image_rule(8, 2, 3, 1, 2, causal));
    // width 6 with a partial last row, default memory (= the query block size)
    check_sparse_pattern(
        {"image-2d", {{"width", "6"}, {"query_rows", "2"}, {"query_cols", "2"}, {"block", "5"}}, 1, 57, causal},
        image_rule(6, 2, 2, 2, 2, causal));
    // width 20 with the default 8 x 8 blocks and 64-position kernel blocks
    check_sparse_pattern({"image-2d", {{"width", "20"}}, 1, 150, causal}, image_rule(20, 8, 8, 8, 8, causal));
  }
}

TEST_CASE("image-2d: peak memory at N = 16384 (128 x 128) below an N x N buffer") {
  check_sparse_memory({"image-2d", {}, 2, 16384, true});
}

TEST_CASE("image-2d: options and errors") {
  auto attn = make_sparse_variant({"image-2d", {}, 1, 0, false});
  const Tensor x = zeros({1, 1, 50, 4}, DType::F64);
  CHECK_THROWS_WITH(
      attn->forward(x, x, x, {}),
      "attention 'image-2d': 50 positions are not a square image; give the image width with option width");
  CHECK_THROWS_WITH(make_sparse_variant({"image-2d", {{"query_rows", "0"}}, 1, 0, false}),
                    "attention 'image-2d': option query_rows expects an integer >= 1, got '0'");
}
