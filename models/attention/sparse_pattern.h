// The pattern engine of position-based sparse attention (Lin et al. 2021, "A Survey of Transformers", §4.1).
//
// A pattern laid over a sequence of n positions answers two questions: allowed(h, i, j), whether query position
// i may attend key position j in head h (the exact rule, causality included), and key_blocks(h, qb), which key
// blocks query block qb may need (a superset, cheap, so that building costs O(N w) and never O(N^2)).
// SparseAttention (models/attention/sparse_attention.h) turns the two into the kernel's BlockSparseLayout.
//
// Atomic patterns (models/attention/sparse_atoms.h) are the survey's building blocks; compound ones are unions of
// atoms, optionally different per head. Each named variant is one file models/attention/<name>.cpp registering
// with ENG_REGISTER_ATTENTION; its options are read once, by the factory, through the helpers below.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/attention/attention.h"

namespace eng {

// Where a pattern is laid: n positions (queries and keys), the model's heads, the block size, causal or not.
struct PatternGeometry {
  int64_t n = 0, heads = 1, block = 64;
  bool causal = false;
  int64_t blocks() const { return (n + block - 1) / block; }
};

class SparsePattern {
 public:
  explicit SparsePattern(const PatternGeometry& g) : g_(g) {}
  virtual ~SparsePattern() = default;
  const PatternGeometry& geometry() const { return g_; }
  // Heads whose patterns differ: 1 when every head shares the pattern, else geometry().heads.
  virtual int64_t heads() const { return 1; }
  // Whether query position i may attend key position j in head h (0 <= i, j < n), causality included.
  virtual bool allowed(int64_t h, int64_t i, int64_t j) const = 0;
  // Appends the key blocks that query block qb of head h may need: a superset of where allowed() holds.
  virtual void key_blocks(int64_t h, int64_t qb, std::vector<int64_t>& out) const = 0;

 protected:
  // Appends the blocks holding key positions [first, last], clipped to the sequence (and to the query block
  // qb when causal); nothing when the range is empty.
  void append_range(int64_t qb, int64_t first, int64_t last, std::vector<int64_t>& out) const;
  // The same without the causal clip, for patterns whose causality is not by position.
  void append_blocks(int64_t first, int64_t last, std::vector<int64_t>& out) const;
  // The positions of query block qb: [q_first(qb), q_last(qb)].
  int64_t q_first(int64_t qb) const { return qb * g_.block; }
  int64_t q_last(int64_t qb) const { return std::min(g_.n, (qb + 1) * g_.block) - 1; }

 private:
  PatternGeometry g_;
};

using PatternPtr = std::unique_ptr<SparsePattern>;
// Lays a variant's pattern (its options already read) over a geometry.
using PatternBuilder = std::function<PatternPtr(const PatternGeometry&)>;

// A query sees what any part allows; each part answers for every head.
PatternPtr union_of(const PatternGeometry& g, std::vector<PatternPtr> parts);
// Head h follows parts[choose(h)]: per-head patterns (Longformer's dilated heads, Sparse Transformer's factors).
PatternPtr per_head(const PatternGeometry& g, std::vector<PatternPtr> parts, std::function<size_t(int64_t)> choose);

// The width of the image that n positions lay out in raster order: `width` when > 0, else the side of a square
// image (n must then be a perfect square). Errors name the variant.
int64_t image_width(int64_t width, int64_t n, const std::string& variant);
// Why an image pattern without option width has no recurrent form (SparseStep::none).
constexpr const char* kSquareNoStep =
    "without option width the image is the square of the sequence length, so row t depends on the length";

}  // namespace eng
