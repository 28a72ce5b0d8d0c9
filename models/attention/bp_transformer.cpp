// `bp-transformer` attention (BP-Transformer, Ye et al. 2019; Lin et al. 2021 §4.1.1, extended sparse attention): the
// sequence is T tokens followed by the span nodes of a binary partition over them (models/attention/bp_transformer.h;
// the caller appends the nodes' inputs, e.g. the mean of their tokens). With k = `window`:
//   token i -> token j       |i - j| <= k                               (contextual edges at level 0)
//   token i -> node (l, m)   1 <= |m - floor(i / 2^l)| <= k, l >= 1     (the k spans on each side of the token's
//                                                                        own span at every level: fine to coarse)
//   node (l, m) -> itself and its two children (level l - 1, 2m and 2m + 1) (affiliated edges)
// so a token sees O(k log T) positions and information climbs the tree one level per layer. The paper removes spans
// already covered at a finer level; we keep them (a few duplicate keys, no missing ones). Causal (the paper's language
// model): token to token 0 <= i - j <= k, token to node 1 <= floor(i / 2^l) - m <= k, i.e. only complete spans before
// the token; nodes read their own span only. Causality is not by position here (nodes come after every token), which is
// why the pattern, not the kernel, owns causality. Cost O(T k log T D).
#include "models/attention/bp_transformer.h"

#include <cstdlib>
#include <string>

#include "engine/error.h"
#include "models/attention/sparse_attention.h"

namespace eng {

BinaryPartition::BinaryPartition(int64_t t) : tokens(t), start{0}, count{t} {
  while (count.back() > 1) {
    start.push_back(start.back() + count.back());
    count.push_back((count.back() + 1) / 2);
  }
}

BinaryPartition partition_of_length(int64_t n, const char* variant) {
  int64_t lo = 1, hi = std::max<int64_t>(n, 1);  // the length grows strictly with the tokens
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (BinaryPartition(mid).length() < n)
      lo = mid + 1;
    else
      hi = mid;
  }
  const BinaryPartition p(lo);
  ENG_CHECK(p.length() == n, "attention '", variant, "': ", n,
            " positions are not T tokens followed by their span "
            "nodes (",
            lo - 1, " tokens make ", BinaryPartition(lo - 1).length(), " positions, ", lo, " make ", p.length(), ")");
  return p;
}

namespace {

class BinaryTree : public SparsePattern {
 public:
  BinaryTree(const PatternGeometry& g, int64_t window)
      : SparsePattern(g), k_(window), p_(partition_of_length(g.n, "bp-transformer")) {}
  bool allowed(int64_t, int64_t i, int64_t j) const override {
    const Node a = node(i), b = node(j);
    const bool causal = geometry().causal;
    if (a.level > 0) return i == j || (b.level == a.level - 1 && b.index / 2 == a.index);
    const int64_t d = (a.index >> b.level) - b.index;
    if (b.level == 0) return causal ? d >= 0 && d <= k_ : std::abs(d) <= k_;
    return causal ? d >= 1 && d <= k_ : std::abs(d) >= 1 && std::abs(d) <= k_;
  }
  void key_blocks(int64_t, int64_t qb, std::vector<int64_t>& out) const override {
    const int64_t first = q_first(qb), last = q_last(qb), T = p_.tokens;
    if (first < T) {
      const int64_t a = first, b = std::min(last, T - 1);
      append_blocks(a - k_, std::min(b + k_, T - 1), out);
      for (int64_t l = 1; l < p_.levels(); ++l)
        append_blocks(p_.start[size_t(l)] + std::max((a >> l) - k_, int64_t(0)),
                      p_.start[size_t(l)] + std::min((b >> l) + k_, p_.count[size_t(l)] - 1), out);
    }
    for (int64_t i = std::max(first, T); i <= last; ++i) {
      const Node a = node(i);
      const int64_t child = p_.start[size_t(a.level - 1)] + 2 * a.index;
      append_blocks(i, i, out);
      append_blocks(child, std::min(child + 1, p_.start[size_t(a.level - 1)] + p_.count[size_t(a.level - 1)] - 1), out);
    }
  }

 private:
  struct Node {
    int64_t level, index;
  };
  Node node(int64_t i) const {
    int64_t l = 0;
    while (l + 1 < p_.levels() && i >= p_.start[size_t(l + 1)]) ++l;
    return {l, i - p_.start[size_t(l)]};
  }
  int64_t k_;
  BinaryPartition p_;
};

// Causal by the tree, not by position: row t of a token reads span nodes that sit after every token, so a step at
// position t cannot have their keys, and a node's position (hence its input's positional encoding) depends on T.
constexpr const char* kNoStep =
    "token t reads the span nodes of the complete spans before it, which the sequence places after all T tokens "
    "(positions T and up, depending on T), so row t reads positions a step at t has not seen";

// The pattern's sequence is the tokens followed by their span nodes: about 2T positions for T tokens.
class BPTransformerAttention : public SparseAttention {
 public:
  using SparseAttention::SparseAttention;
  int64_t positions(int64_t tokens) const override { return BinaryPartition(tokens).length(); }
};

// nodes=appended (the default): the caller appends the nodes' inputs; nodes=pooled: the attention pools them
// (models/attention/bp_pooled.cpp).
std::unique_ptr<Attention> make_bp_transformer(const AttentionConfig& c) {
  const int64_t k = c.options.get_int("window", 4, IntRange::at_least(0));
  const std::string nodes = c.options.get_string("nodes", "appended");
  ENG_CHECK(nodes == "appended" || nodes == "pooled",
            "attention 'bp-transformer': option nodes expects appended or pooled, got '", nodes, "'");
  PatternBuilder tree = [k](const PatternGeometry& g) { return std::make_unique<BinaryTree>(g, k); };
  if (nodes == "pooled") return make_bp_pooled(c, k, std::move(tree));
  return std::make_unique<BPTransformerAttention>("bp-transformer", c, std::move(tree), "", SparseStep{kNoStep});
}

}  // namespace

// The sweep runs the pooled form: T tokens in, and a recurrent form to check against the parallel one.
ENG_REGISTER_ATTENTION(bp_transformer, "bp-transformer",
                       "BP-Transformer attention: tokens see neighbours and k spans per level of a binary partition",
                       make_bp_transformer, {{"nodes", "pooled"}});

}  // namespace eng
