#include "datasets/recall_task.h"

#include <numeric>
#include <utility>
#include <vector>

#include "engine/error.h"

namespace eng {

RecallTask::RecallTask(int64_t max_pairs, int64_t keys, int64_t values, bool fixed_pairs)
    : max_pairs_(max_pairs), keys_(keys), values_(values), fixed_(fixed_pairs) {
  ENG_CHECK(max_pairs >= 1, "recall task: max_pairs must be >= 1, got ", max_pairs);
  ENG_CHECK(keys >= max_pairs, "recall task: keys must be distinct, so ", max_pairs, " pairs need at least ",
            max_pairs, " keys, got ", keys);
  ENG_CHECK(values >= 1, "recall task: needs at least one value, got ", values);
}

LMBatch RecallTask::sample(const Rng& stream, int64_t first_row, int64_t batch) const {
  const int64_t L = seq_len();
  LMBatch b{zeros({batch, L}, DType::I64), full({batch, L}, double(kIgnore), DType::I64)};
  std::vector<int64_t> key_pool(static_cast<size_t>(keys_));
  for (int64_t i = 0; i < batch; ++i) {
    Rng rng = stream.fork(uint64_t(first_row + i));
    const int64_t n = fixed_ ? max_pairs_ : 1 + int64_t(rng.below(uint64_t(max_pairs_)));
    // The first n keys of a partial Fisher-Yates shuffle: n distinct keys in random order.
    std::iota(key_pool.begin(), key_pool.end(), 0);
    for (int64_t k = 0; k < n; ++k)
      std::swap(key_pool[size_t(k)], key_pool[size_t(k) + rng.below(uint64_t(keys_ - k))]);
    int64_t* row = b.inputs.data<int64_t>() + i * L;
    for (int64_t k = 0; k < n; ++k) {
      row[2 * k] = 2 + key_pool[size_t(k)];
      row[2 * k + 1] = 2 + keys_ + int64_t(rng.below(uint64_t(values_)));
    }
    const int64_t q = int64_t(rng.below(uint64_t(n)));
    row[2 * n] = kQuery;
    row[2 * n + 1] = row[2 * q];
    row[2 * n + 2] = row[2 * q + 1];
    // Position 2n + 1 (the query key) predicts the token after it: the value.
    b.targets.data<int64_t>()[i * L + 2 * n + 1] = row[2 * q + 1];
  }
  return b;
}

}  // namespace eng
