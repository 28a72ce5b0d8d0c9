// Seeded shuffled batches over n examples. Epoch e visits every example once, in the order of a
// Fisher-Yates permutation drawn from Rng(seed, e << 40), so the order depends on (seed, epoch) only and
// the whole state is (epoch, cursor): a checkpoint saves those two numbers and resumes the same sequence.
// Batches always hold `batch` indices (fixed shapes for training): one that reaches the end of an epoch
// continues into the next epoch's order.
#pragma once
#include <cstdint>
#include <vector>

namespace eng {

class BatchSampler {
 public:
  BatchSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> next(int64_t batch);

  int64_t epoch() const { return epoch_; }
  int64_t cursor() const { return cursor_; }  // position inside the current epoch's order
  void set_state(int64_t epoch, int64_t cursor);

 private:
  void shuffle();

  int64_t n_;
  uint64_t seed_;
  int64_t epoch_ = 0, cursor_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace eng
