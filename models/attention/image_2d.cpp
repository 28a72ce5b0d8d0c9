// `image-2d` attention (Image Transformer, Parmar et al. 2018, §3.2 "2D local attention"; Lin et al. 2021 §4.1.1,
// extended sparse attention): the n positions are an image of `width` columns in raster order (row r = i / width,
// column c = i % width). The image is cut into query blocks of query_rows x query_cols pixels; a query block's memory
// block extends it by memory_rows rows above and memory_cols columns on each side, and a pixel attends every pixel of
// its query block's memory block. Causal (the paper's generation): additionally j <= i in raster order, and the memory
// block does not extend below. Non-causal, our extension: the memory block also extends memory_rows below. The paper
// generates the image block by block; a raster-order decoder is what a plain causal model is, so here causality is
// raster order. Cost O(N (query_rows + 2 memory_rows)(query_cols + 2 memory_cols) D).
#include <algorithm>
#include <utility>

#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

struct Image2dShape {
  int64_t width, qh, qw, mh, mw;
};

class Image2d : public SparsePattern {
 public:
  Image2d(const PatternGeometry& g, const Image2dShape& s) : SparsePattern(g), s_(s) {}
  bool allowed(int64_t, int64_t i, int64_t j) const override {
    const int64_t top = i / s_.width / s_.qh * s_.qh, left = i % s_.width / s_.qw * s_.qw;
    const int64_t r = j / s_.width, c = j % s_.width;
    return r >= top - s_.mh && r <= bottom(top) && c >= left - s_.mw && c <= left + s_.qw - 1 + s_.mw &&
           (!geometry().causal || j <= i);
  }
  void key_blocks(int64_t, int64_t qb, std::vector<int64_t>& out) const override {
    std::vector<std::pair<int64_t, int64_t>> blocks;  // (top row, left column) of the image blocks of the queries
    for (int64_t r = q_first(qb) / s_.width; r <= q_last(qb) / s_.width; ++r) {
      const int64_t c0 = std::max(q_first(qb) - r * s_.width, int64_t(0));
      const int64_t c1 = std::min(q_last(qb) - r * s_.width, s_.width - 1);
      for (int64_t c = c0 / s_.qw * s_.qw; c <= c1; c += s_.qw) {
        const std::pair<int64_t, int64_t> b{r / s_.qh * s_.qh, c};
        if (std::find(blocks.begin(), blocks.end(), b) == blocks.end()) blocks.push_back(b);
      }
    }
    for (const auto& b : blocks)
      for (int64_t r = std::max(b.first - s_.mh, int64_t(0)); r <= bottom(b.first); ++r)
        append_range(qb, r * s_.width + std::max(b.second - s_.mw, int64_t(0)),
                     r * s_.width + std::min(b.second + s_.qw - 1 + s_.mw, s_.width - 1), out);
  }

 private:
  // The last memory row of the query block whose first row is `top`.
  int64_t bottom(int64_t top) const { return top + s_.qh - 1 + (geometry().causal ? 0 : s_.mh); }
  Image2dShape s_;
};

std::unique_ptr<Attention> make_image_2d(const AttentionConfig& c) {
  const int64_t width = c.options.get_int("width", 0, IntRange::at_least(0));
  const int64_t qh = c.options.get_int("query_rows", 8, IntRange::at_least(1));
  const int64_t qw = c.options.get_int("query_cols", 8, IntRange::at_least(1));
  const int64_t mh = c.options.get_int("memory_rows", qh, IntRange::at_least(0));
  const int64_t mw = c.options.get_int("memory_cols", qw, IntRange::at_least(0));
  return std::make_unique<SparseAttention>("image-2d", c, [=](const PatternGeometry& g) {
    return std::make_unique<Image2d>(g, Image2dShape{image_width(width, g.n, "image-2d"), qh, qw, mh, mw});
  }, "", SparseStep{width > 0 ? "" : kSquareNoStep});
}

}  // namespace

ENG_REGISTER_ATTENTION(image_2d, "image-2d",
                       "Image Transformer 2D local attention: query blocks of pixels attend their memory blocks",
                       make_image_2d, {{"width", "4"}});  // the sweep's 16 positions as a 4 x 4 image: a step

}  // namespace eng
