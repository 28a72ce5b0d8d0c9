// What `sparse-strided` and `sparse-fixed` share (Child et al. 2019, "Generating Long Sequences with Sparse
// Transformers", §4.2-4.3): a factorised pattern of two parts A1 and A2, spread over heads or merged.
//   factorize=heads  (default) even heads attend by A1, odd heads by A2 (the paper's multi-head attention;
//                    needs at least 2 heads);
//   factorize=merged every head attends by A1 ∪ A2 (the paper's merged head).
// The paper's third option interleaves A1 and A2 over residual blocks; with one options set per model that is
// a per-layer choice this variant does not have.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "models/attention/sparse_pattern.h"

namespace eng {

// Reads option factorize (heads | merged); true for merged.
inline bool read_merged(const AttentionConfig& c, const std::string& variant) {
  const std::string f = c.options.get_string("factorize", "heads");
  ENG_CHECK(f == "heads" || f == "merged", "attention '", variant, "': option factorize must be heads or merged, got '",
            f, "'");
  ENG_CHECK(f == "merged" || c.heads >= 2, "attention '", variant,
            "': factorize=heads needs at least 2 heads (one per part), the model has ", c.heads,
            "; use factorize=merged");
  return f == "merged";
}

inline PatternPtr factorized(const PatternGeometry& g, const std::string& variant, PatternPtr a1, PatternPtr a2,
                             bool merged) {
  std::vector<PatternPtr> parts;
  parts.push_back(std::move(a1));
  parts.push_back(std::move(a2));
  if (merged) return union_of(g, std::move(parts));
  ENG_CHECK(g.heads >= 2, "attention '", variant, "': factorize=heads needs at least 2 heads, the input has ", g.heads);
  return per_head(g, std::move(parts), [](int64_t h) { return size_t(h % 2); });
}

}  // namespace eng
