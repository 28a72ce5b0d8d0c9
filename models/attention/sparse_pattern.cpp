#include "models/attention/sparse_pattern.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"

namespace eng {

void SparsePattern::append_range(int64_t qb, int64_t first, int64_t last, std::vector<int64_t>& out) const {
  append_blocks(first, g_.causal ? std::min(last, q_last(qb)) : last, out);
}

void SparsePattern::append_blocks(int64_t first, int64_t last, std::vector<int64_t>& out) const {
  first = std::max<int64_t>(first, 0);
  last = std::min(last, g_.n - 1);
  if (first > last) return;
  for (int64_t kb = first / g_.block; kb <= last / g_.block; ++kb) out.push_back(kb);
}

namespace {

class Union : public SparsePattern {
 public:
  Union(const PatternGeometry& g, std::vector<PatternPtr> parts) : SparsePattern(g), parts_(std::move(parts)) {}
  int64_t heads() const override {
    int64_t h = 1;
    for (const auto& p : parts_) h = std::max(h, p->heads());
    return h;
  }
  bool allowed(int64_t h, int64_t i, int64_t j) const override {
    for (const auto& p : parts_)
      if (p->allowed(h, i, j)) return true;
    return false;
  }
  void key_blocks(int64_t h, int64_t qb, std::vector<int64_t>& out) const override {
    for (const auto& p : parts_) p->key_blocks(h, qb, out);
  }

 private:
  std::vector<PatternPtr> parts_;
};

class PerHead : public SparsePattern {
 public:
  PerHead(const PatternGeometry& g, std::vector<PatternPtr> parts, std::function<size_t(int64_t)> choose)
      : SparsePattern(g), parts_(std::move(parts)), choose_(std::move(choose)) {}
  int64_t heads() const override { return geometry().heads; }
  bool allowed(int64_t h, int64_t i, int64_t j) const override { return part(h).allowed(h, i, j); }
  void key_blocks(int64_t h, int64_t qb, std::vector<int64_t>& out) const override { part(h).key_blocks(h, qb, out); }

 private:
  const SparsePattern& part(int64_t h) const { return *parts_[choose_(h)]; }
  std::vector<PatternPtr> parts_;
  std::function<size_t(int64_t)> choose_;
};

}  // namespace

PatternPtr union_of(const PatternGeometry& g, std::vector<PatternPtr> parts) {
  return std::make_unique<Union>(g, std::move(parts));
}

PatternPtr per_head(const PatternGeometry& g, std::vector<PatternPtr> parts, std::function<size_t(int64_t)> choose) {
  return std::make_unique<PerHead>(g, std::move(parts), std::move(choose));
}

int64_t image_width(int64_t width, int64_t n, const std::string& variant) {
  if (width > 0) return width;
  int64_t side = int64_t(std::sqrt(double(n)));
  while (side * side > n) --side;
  while ((side + 1) * (side + 1) <= n) ++side;
  ENG_CHECK(side * side == n, "attention '", variant, "': ", n,
            " positions are not a square image; give the image width with option width");
  return std::max<int64_t>(side, 1);
}

}  // namespace eng
