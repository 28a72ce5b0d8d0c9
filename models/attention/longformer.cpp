// `longformer` attention (Beltagy et al. 2020, §3.1; Lin et al. 2021 §4.1.1): a sliding window of `window` keys
// on each side (the paper's w is our 2 window), global attention on the first `globals` positions (the paper's
// task tokens: [CLS], the question), and on the last `dilated_heads` heads a dilated window (dilation `dilation`)
// instead of the plain one, the paper's multi-head setting that widens the receptive field at the same cost.
// Causal: the windows look back only (the paper's autoregressive language model) and the global tokens are a
// prefix every query reads. Cost O(N (2 window + 1 + globals) D) plus O(globals N D).
#include "engine/error.h"
#include "models/attention/sparse_atoms.h"
#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

// Causal row t reads the window back to t - window (t - window * dilation on dilated heads) and the global prefix:
// the recurrent form keeps a ring of that reach plus the first `globals` positions, whatever the length.
SparseStep longformer_step(int64_t window, int64_t globals, int64_t dilated_heads, int64_t dilation) {
  const int64_t reach = dilated_heads > 0 ? window * dilation : window;
  return SparseStep{"", reach, [globals](int64_t j) { return j < globals ? j : int64_t(-1); }};
}

std::unique_ptr<Attention> make_longformer(const AttentionConfig& c) {
  const int64_t w = c.options.get_int("window", 64, IntRange::at_least(0));
  const int64_t n = c.options.get_int("globals", 1, IntRange::at_least(0));
  const int64_t dh = c.options.get_int("dilated_heads", 0, IntRange::at_least(0));
  const int64_t d = c.options.get_int("dilation", 2, IntRange::at_least(1));
  ENG_CHECK(dh <= c.heads, "attention 'longformer': option dilated_heads = ", dh, " but the model has ", c.heads,
            " heads");
  return std::make_unique<SparseAttention>("longformer", c, [w, n, dh, d](const PatternGeometry& g) {
    ENG_CHECK(dh <= g.heads, "attention 'longformer': option dilated_heads = ", dh, " but the input has ", g.heads,
              " heads");
    std::vector<PatternPtr> parts;
    if (dh == 0) {
      parts.push_back(band_pattern(g, w));
    } else {  // heads first_dilated .. H-1 dilated
      std::vector<PatternPtr> windows;
      windows.push_back(band_pattern(g, w));
      windows.push_back(dilated_pattern(g, w, d));
      const int64_t first_dilated = g.heads - dh;
      parts.push_back(
          per_head(g, std::move(windows), [first_dilated](int64_t h) { return size_t(h >= first_dilated); }));
    }
    if (n > 0) parts.push_back(global_pattern(g, n));
    return union_of(g, std::move(parts));
  }, "", longformer_step(w, n, dh, d));
}

}  // namespace

ENG_REGISTER_ATTENTION(longformer, "longformer",
                       "Longformer sparse attention: sliding window + global tokens + dilated windows on chosen heads",
                       make_longformer);

}  // namespace eng
