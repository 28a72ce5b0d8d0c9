#include "datasets/seq2seq_tasks.h"

#include <algorithm>

#include "engine/error.h"

namespace eng {

Seq2SeqTask::Seq2SeqTask(Kind kind, int64_t max_len, int64_t symbols, bool fixed_length)
    : kind_(kind), max_len_(max_len), symbols_(symbols), fixed_(fixed_length) {
  ENG_CHECK(max_len >= 1, "seq2seq task: max_len must be >= 1, got ", max_len);
  ENG_CHECK(symbols >= 1, "seq2seq task: needs at least one symbol, got ", symbols);
}

Seq2SeqBatch Seq2SeqTask::sample(const Rng& stream, int64_t first_row, int64_t batch) const {
  const int64_t Ls = max_len_, Lt = max_len_ + 1;
  Seq2SeqBatch b{zeros({batch, Ls}, DType::I64), {}, zeros({batch, Lt}, DType::I64),
                 full({batch, Lt}, double(kIgnore), DType::I64)};
  for (int64_t i = 0; i < batch; ++i) {
    Rng rng = stream.fork(uint64_t(first_row + i));
    const int64_t n = fixed_ ? max_len_ : 1 + int64_t(rng.below(uint64_t(max_len_)));
    std::vector<int64_t> x(static_cast<size_t>(n));
    for (auto& s : x) s = 3 + int64_t(rng.below(uint64_t(symbols_)));
    std::vector<int64_t> y = x;
    if (kind_ == Kind::Reverse)
      std::reverse(y.begin(), y.end());
    else
      std::sort(y.begin(), y.end());
    int64_t* src = b.src.data<int64_t>() + i * Ls;
    int64_t* tin = b.tgt_in.data<int64_t>() + i * Lt;
    int64_t* tout = b.tgt_out.data<int64_t>() + i * Lt;
    std::copy(x.begin(), x.end(), src);
    tin[0] = kBegin;
    for (int64_t t = 0; t < n; ++t) {
      tin[t + 1] = y[size_t(t)];
      tout[t] = y[size_t(t)];
    }
    tout[n] = kEnd;
    b.src_lengths.push_back(n);
  }
  return b;
}

}  // namespace eng
