#include "datasets/bpe.h"

#include <queue>

namespace eng {

void BpeMerges::add(int32_t left, int32_t right, int32_t rank, int32_t result) {
  table_.emplace(key(left, right), BpeMerge{rank, result});
}

namespace {

struct Candidate {
  int32_t rank;
  int32_t pos;  // index of the left symbol in the original sequence
  int32_t left, right;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void BpeMerges::apply(std::vector<int32_t>& ids) const {
  const int32_t n = int32_t(ids.size());
  if (n < 2) return;
  // The sequence as a linked list over the original positions; a merged-away position gets id -1.
  std::vector<int32_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) prev[size_t(i)] = i - 1, next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  const auto push = [&](int32_t pos) {
    if (pos < 0 || next[size_t(pos)] < 0) return;
    const int32_t l = ids[size_t(pos)], r = ids[size_t(next[size_t(pos)])];
    if (const BpeMerge* m = find(l, r)) heap.push({m->rank, pos, l, r});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[size_t(c.pos)];
    if (ids[size_t(c.pos)] != c.left || right < 0 || ids[size_t(right)] != c.right) continue;  // stale
    ids[size_t(c.pos)] = find(c.left, c.right)->result;
    ids[size_t(right)] = -1;
    next[size_t(c.pos)] = next[size_t(right)];
    if (next[size_t(right)] >= 0) prev[size_t(next[size_t(right)])] = c.pos;
    push(prev[size_t(c.pos)]);
    push(c.pos);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) ids[out++] = ids[size_t(i)];
  ids.resize(out);
}

}  // namespace eng
