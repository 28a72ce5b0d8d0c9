// `axial` attention (Axial Transformer, Ho et al. 2019; Lin et al. 2021 §4.1.1, extended sparse attention): the n
// positions are an image of `width` columns in raster order, and a position attends along one axis at a time: along its
// row (same i / width) or along its column (same i % width). axis=heads (default) gives even heads the rows and odd
// heads the columns, so one layer mixes both; axis=rows or axis=columns gives every head one axis (the paper alternates
// axes over layers). Causal: j <= i in raster order, the paper's masked row and masked column attention. Cost O(N
// (width + N / width) D) in keys; the column blocks of a raster-order layout are mostly masked, so a column head runs
// about N^2 / block tile elements: choose a small block for long column attention.
#include "engine/error.h"
#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

enum class Axis { Rows, Columns, Heads };

class Axial : public SparsePattern {
 public:
  Axial(const PatternGeometry& g, int64_t width, Axis axis) : SparsePattern(g), w_(width), axis_(axis) {}
  int64_t heads() const override { return axis_ == Axis::Heads ? geometry().heads : 1; }
  bool allowed(int64_t h, int64_t i, int64_t j) const override {
    const bool same = rows(h) ? i / w_ == j / w_ : i % w_ == j % w_;
    return same && (!geometry().causal || j <= i);
  }
  void key_blocks(int64_t h, int64_t qb, std::vector<int64_t>& out) const override {
    const int64_t first = q_first(qb), last = q_last(qb);
    if (rows(h)) {
      append_range(qb, first / w_ * w_, last / w_ * w_ + w_ - 1, out);
      return;
    }
    // The columns of the queries: one run, or two when they wrap onto the next row, or all of them.
    int64_t runs[2][2] = {{first % w_, last % w_}, {1, 0}};
    if (last / w_ == first / w_ + 1) runs[0][1] = w_ - 1, runs[1][0] = 0, runs[1][1] = last % w_;
    if (last / w_ > first / w_ + 1) runs[0][0] = 0, runs[0][1] = w_ - 1;
    for (int64_t r = 0; r * w_ < geometry().n; ++r)
      for (const auto& run : runs)
        if (run[0] <= run[1]) append_range(qb, r * w_ + run[0], r * w_ + run[1], out);
  }

 private:
  bool rows(int64_t h) const { return axis_ == Axis::Rows || (axis_ == Axis::Heads && h % 2 == 0); }
  int64_t w_;
  Axis axis_;
};

std::unique_ptr<Attention> make_axial(const AttentionConfig& c) {
  const int64_t width = c.options.get_int("width", 0, IntRange::at_least(0));
  const std::string a = c.options.get_string("axis", "heads");
  ENG_CHECK(a == "heads" || a == "rows" || a == "columns",
            "attention 'axial': option axis must be heads, rows or columns, got '", a, "'");
  ENG_CHECK(a != "heads" || c.heads >= 2, "attention 'axial': axis=heads needs at least 2 heads, the model has ",
            c.heads, "; use axis=rows or axis=columns");
  const Axis axis = a == "rows" ? Axis::Rows : a == "columns" ? Axis::Columns : Axis::Heads;
  return std::make_unique<SparseAttention>("axial", c, [width, axis](const PatternGeometry& g) {
    ENG_CHECK(axis != Axis::Heads || g.heads >= 2,
              "attention 'axial': axis=heads needs at least 2 heads, the input has ", g.heads);
    return std::make_unique<Axial>(g, image_width(width, g.n, "axial"), axis);
  }, "", SparseStep{width > 0 ? "" : kSquareNoStep});
}

}  // namespace

ENG_REGISTER_ATTENTION(axial, "axial",
                       "Axial Transformer attention: along rows or columns of an image, per head or for all heads",
                       make_axial, {{"width", "4"}});  // the sweep's 16 positions as a 4 x 4 image: a step

}  // namespace eng
