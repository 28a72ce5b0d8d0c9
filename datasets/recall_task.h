// Associative recall (Ba et al. 2016, "Using fast weights to attend to the recent past"; the synthetic
// probe of in-context lookup used to compare attention variants): a list of key-value pairs with
// distinct keys, a query marker, one of the keys, and its value. A causal model must recall the value;
// the target is kIgnore everywhere but at the query key, whose next token is the answer.
//   tokens: 0 = padding, 1 = query marker, 2 .. keys + 1 = keys, keys + 2 .. keys + values + 1 = values
//   row:    k1 v1 k2 v2 ... kn vn ? kq vq 0 ...  (n random in [1, max_pairs], or max_pairs always)
#pragma once
#include "datasets/lm_batch.h"
#include "engine/rng.h"

namespace eng {

class RecallTask {
 public:
  RecallTask(int64_t max_pairs, int64_t keys = 16, int64_t values = 16, bool fixed_pairs = false);
  // Rows [first_row, first_row + batch) of a batch drawn from `stream`: row g from stream.fork(g) alone.
  LMBatch sample(const Rng& stream, int64_t first_row, int64_t batch) const;
  int64_t vocab() const { return keys_ + values_ + 2; }
  int64_t seq_len() const { return 2 * max_pairs_ + 3; }
  static constexpr int64_t kQuery = 1;

 private:
  int64_t max_pairs_, keys_, values_;
  bool fixed_;
};

}  // namespace eng
