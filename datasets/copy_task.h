// The copy task of Katharopoulos et al. 2020 (§4.1.1): a random string of symbols, a separator, and the
// same string again; a causal model must reproduce the first half. Sequences have up to `max_len` tokens
// (random length, or always the longest with fixed_length). Targets are the next token on the copied half
// and ignore_index elsewhere, so loss and accuracy measure the copy only.
//   tokens: 0 = padding, 1 = separator, 2 .. symbols + 1 = the symbols
#pragma once
#include "datasets/lm_batch.h"
#include "engine/rng.h"
#include "engine/tensor.h"

namespace eng {

class CopyTask {
 public:
  CopyTask(int64_t max_len, int64_t symbols = 10, bool fixed_length = false);
  // Rows [first_row, first_row + batch) of a batch drawn from `stream`: row g from stream.fork(g) alone.
  LMBatch sample(const Rng& stream, int64_t first_row, int64_t batch) const;
  int64_t vocab() const { return symbols_ + 2; }
  int64_t max_len() const { return max_len_; }

 private:
  int64_t max_len_, symbols_;
  bool fixed_;
};

}  // namespace eng
