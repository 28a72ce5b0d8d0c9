// `global` attention, the atomic pattern of Lin et al. 2021 §4.1.1: the first `globals` positions are global
// nodes, which attend to every position and which every position attends to; causal: the same with j <= i, so the
// global nodes become the prefix every later query reads. Cost O(N globals D) plus O(globals N D) for the global
// rows.
#include "models/attention/sparse_atoms.h"
#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

class Global : public SparsePattern {
 public:
  Global(const PatternGeometry& g, int64_t globals) : SparsePattern(g), g_(globals) {}
  bool allowed(int64_t, int64_t i, int64_t j) const override {
    return (i < g_ || j < g_) && (!geometry().causal || j <= i);
  }
  void key_blocks(int64_t, int64_t qb, std::vector<int64_t>& out) const override {
    append_range(qb, 0, q_first(qb) < g_ ? geometry().n - 1 : g_ - 1, out);
  }

 private:
  int64_t g_;
};

}  // namespace

PatternPtr global_pattern(const PatternGeometry& g, int64_t globals) { return std::make_unique<Global>(g, globals); }

namespace {

std::unique_ptr<Attention> make_global(const AttentionConfig& c) {
  const int64_t n = c.options.get_int("globals", 1, IntRange::at_least(1));
  // Causal row t reads 0 .. t while t < globals, then only 0 .. globals-1: the recurrent form keeps the global
  // prefix and a ring of the current position, globals + 1 slots whatever the length.
  return std::make_unique<SparseAttention>(
      "global", c, [n](const PatternGeometry& g) { return global_pattern(g, n); }, "",
      SparseStep{"", 0, [n](int64_t j) { return j < n ? j : int64_t(-1); }});
}

}  // namespace

ENG_REGISTER_ATTENTION(global, "global", "global-node sparse attention: the first `globals` positions see and are seen by all",
                       make_global);

}  // namespace eng
