// `sparse-fixed` attention (Child et al. 2019, §4.2, the fixed pattern; Lin et al. 2021 §4.1.1), for data without
// a period (text), with `stride` l and `summary` c:
//   A1(i) = {j : floor(j / l) = floor(i / l), j <= i}   the own block of l positions
//   A2(i) = {j : j mod l >= l - c, j <= i}             the last c positions of every block (summary cells)
// That is the paper's, causal, form; the non-causal form, our extension for encoders, drops j <= i. Factorised
// over heads or merged (models/attention/sparse_transformer.h). Cost O(N (l + c N / l) D).
#include "engine/error.h"
#include "models/attention/sparse_attention.h"
#include "models/attention/sparse_transformer.h"

namespace eng {
namespace {

class FixedLocal : public SparsePattern {
 public:
  FixedLocal(const PatternGeometry& g, int64_t stride) : SparsePattern(g), l_(stride) {}
  bool allowed(int64_t, int64_t i, int64_t j) const override {
    return i / l_ == j / l_ && (!geometry().causal || j <= i);
  }
  void key_blocks(int64_t, int64_t qb, std::vector<int64_t>& out) const override {
    append_range(qb, q_first(qb) / l_ * l_, (q_last(qb) / l_ + 1) * l_ - 1, out);
  }

 private:
  int64_t l_;
};

class Summary : public SparsePattern {
 public:
  Summary(const PatternGeometry& g, int64_t stride, int64_t summary) : SparsePattern(g), l_(stride), c_(summary) {}
  bool allowed(int64_t, int64_t i, int64_t j) const override {
    return j % l_ >= l_ - c_ && (!geometry().causal || j <= i);
  }
  void key_blocks(int64_t, int64_t qb, std::vector<int64_t>& out) const override {
    for (int64_t s = 0; s * l_ < geometry().n; ++s) append_range(qb, s * l_ + l_ - c_, s * l_ + l_ - 1, out);
  }

 private:
  int64_t l_, c_;
};

std::unique_ptr<Attention> make_sparse_fixed(const AttentionConfig& c) {
  const int64_t l = c.options.get_int("stride", sparse_block(c), IntRange::at_least(1));
  const int64_t s = c.options.get_int("summary", std::max<int64_t>(1, l / 8), IntRange{1, l});  // at most the stride
  const bool merged = read_merged(c, "sparse-fixed");
  // Causal row t reads its own block (at most l - 1 back) and every summary cell before it: the recurrent form
  // keeps a ring of l positions and the summary cells, s of every l positions (index b s + j mod l - (l - s) for
  // cell j of block b).
  const auto summary = [l, s](int64_t j) { return j % l >= l - s ? j / l * s + j % l - (l - s) : int64_t(-1); };
  return std::make_unique<SparseAttention>("sparse-fixed", c, [l, s, merged](const PatternGeometry& g) {
    return factorized(g, "sparse-fixed", std::make_unique<FixedLocal>(g, l), std::make_unique<Summary>(g, l, s),
                      merged);
  }, "", SparseStep{"", l - 1, summary});
}

}  // namespace

ENG_REGISTER_ATTENTION(sparse_fixed, "sparse-fixed", "Sparse Transformer fixed attention (Child et al. 2019), per head or merged",
                       make_sparse_fixed);

}  // namespace eng
