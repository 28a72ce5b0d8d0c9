// The merge step of byte-pair encoding (Sennrich et al. 2016): a table of merges, each turning an adjacent pair of
// token ids (left, right) into one token, with a rank (lower merges first). apply() rewrites a sequence of ids until
// no adjacent pair has a merge, each time merging the pair of lowest rank, the leftmost of equal ranks. For a merge
// list in which every token is made before a merge uses it (what trainers write), this is the same as GPT-2's rule,
// "merge every occurrence of the lowest-ranked pair, left to right, then look again".
//
// Cost: O(n log n) for n ids: the candidate pairs sit in a heap, the sequence in a linked list, and a candidate
// whose neighbours have changed since it was pushed is recognised and dropped when popped. That holds because a
// merge's result is longer (in bytes) than either part (datasets/tokenizer.cpp refuses any other merge), so a
// position never holds the same id twice.
#pragma once
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace eng {

struct BpeMerge {
  int32_t rank;
  int32_t result;
};

class BpeMerges {
 public:
  // A pair already present keeps its lower-ranked merge (a later duplicate line changes nothing).
  void add(int32_t left, int32_t right, int32_t rank, int32_t result);
  const BpeMerge* find(int32_t left, int32_t right) const {
    const auto it = table_.find(key(left, right));
    return it == table_.end() ? nullptr : &it->second;
  }
  size_t size() const { return table_.size(); }
  void apply(std::vector<int32_t>& ids) const;

 private:
  static uint64_t key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }
  std::unordered_map<uint64_t, BpeMerge> table_;
};

}  // namespace eng
