// `etc` attention (ETC, Ainslie et al. 2020; Lin et al. 2021 §4.1.1): band attention over the long input plus
// external global tokens. The first `globals` positions are the global input (tokens the caller prepends, e.g.
// one per sentence or segment), the rest the long input: global tokens attend to everything (g2g, g2l), long
// tokens attend to every global token (l2g) and to the long tokens within `window` (l2l). By positions this is
// band + global, with the global tokens being extra inputs rather than chosen tokens of the text. No causal form:
// ETC is an encoder whose global tokens summarise the whole input. Cost O(N (2 window + 1 + globals) D) plus
// O(globals N D).
#include "models/attention/sparse_atoms.h"
#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

std::unique_ptr<Attention> make_etc(const AttentionConfig& c) {
  const int64_t w = c.options.get_int("window", 64, IntRange::at_least(0));
  const int64_t n = c.options.get_int("globals", 1, IntRange::at_least(1));
  auto pattern = [w, n](const PatternGeometry& g) {
    std::vector<PatternPtr> parts;
    parts.push_back(global_pattern(g, n));
    parts.push_back(band_pattern(g, w));
    return union_of(g, std::move(parts));
  };
  return std::make_unique<SparseAttention>("etc", c, pattern, "the global tokens summarise the whole input");
}

}  // namespace

ENG_REGISTER_ATTENTION(etc, "etc", "ETC sparse attention: band over the long input plus external global tokens in front",
                       make_etc);

}  // namespace eng
