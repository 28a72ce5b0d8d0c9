// Sequence-to-sequence synthetic tasks for the encoder-decoder: reverse a string, or sort it.
//   tokens: 0 = padding, 1 = begin, 2 = end, 3 .. symbols + 2 = the symbols
// tgt_in = [begin, y...], tgt_out = [y..., end], padded with kIgnore in tgt_out.
#pragma once
#include <string>
#include <vector>

#include "datasets/lm_batch.h"
#include "engine/rng.h"

namespace eng {

struct Seq2SeqBatch {
  Tensor src;                        // [B, Ls] i64, padded with 0
  std::vector<int64_t> src_lengths;  // valid source tokens per row
  Tensor tgt_in;                     // [B, Lt] i64
  Tensor tgt_out;                    // [B, Lt] i64
};

class Seq2SeqTask {
 public:
  enum class Kind { Reverse, Sort };
  Seq2SeqTask(Kind kind, int64_t max_len, int64_t symbols = 10, bool fixed_length = false);
  // Rows [first_row, first_row + batch) of a batch drawn from `stream`: row g from stream.fork(g) alone.
  Seq2SeqBatch sample(const Rng& stream, int64_t first_row, int64_t batch) const;
  int64_t vocab() const { return symbols_ + 3; }
  static constexpr int64_t kBegin = 1, kEnd = 2;

 private:
  Kind kind_;
  int64_t max_len_, symbols_;
  bool fixed_;
};

}  // namespace eng
