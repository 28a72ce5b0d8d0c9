// The global index of the first row of the batch being computed: 0, unless a training step's micro-batch (rows
// [first, first + b) of the step's batch, tools/train/data_parallel.h) set it for its forward. Ops that draw
// randomness per row (dropout) key row i by batch_first_row() + i, so a batch split into micro-batches, in one
// process or over ranks, draws what the whole batch draws.
#pragma once
#include <cstdint>

namespace eng {

int64_t batch_first_row();

// Sets batch_first_row() for its lifetime (on the calling thread).
class BatchRowScope {
 public:
  explicit BatchRowScope(int64_t first_row);
  ~BatchRowScope();
  BatchRowScope(const BatchRowScope&) = delete;
  BatchRowScope& operator=(const BatchRowScope&) = delete;

 private:
  int64_t prev_;
};

}  // namespace eng
