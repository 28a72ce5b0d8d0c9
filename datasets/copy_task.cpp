#include "datasets/copy_task.h"

#include "engine/error.h"

namespace eng {

CopyTask::CopyTask(int64_t max_len, int64_t symbols, bool fixed_length)
    : max_len_(max_len), symbols_(symbols), fixed_(fixed_length) {
  ENG_CHECK(max_len >= 3, "copy task: max_len must be >= 3 (one symbol, separator, copy), got ", max_len);
  ENG_CHECK(symbols >= 1, "copy task: needs at least one symbol, got ", symbols);
}

LMBatch CopyTask::sample(const Rng& stream, int64_t first_row, int64_t batch) const {
  const int64_t L = max_len_, longest = (max_len_ - 1) / 2;
  LMBatch b{zeros({batch, L}, DType::I64), full({batch, L}, double(kIgnore), DType::I64)};
  int64_t* in = b.inputs.data<int64_t>();
  int64_t* tg = b.targets.data<int64_t>();
  for (int64_t i = 0; i < batch; ++i) {
    Rng rng = stream.fork(uint64_t(first_row + i));
    const int64_t n = fixed_ ? longest : 1 + int64_t(rng.below(uint64_t(longest)));
    int64_t* row = in + i * L;
    int64_t* trow = tg + i * L;
    for (int64_t t = 0; t < n; ++t) row[t] = 2 + int64_t(rng.below(uint64_t(symbols_)));
    row[n] = 1;
    for (int64_t t = 0; t < n; ++t) row[n + 1 + t] = row[t];
    // Position p predicts token p + 1: the copied half is predicted from the separator on.
    for (int64_t t = 0; t < n; ++t) trow[n + t] = row[n + 1 + t];
  }
  return b;
}

}  // namespace eng
