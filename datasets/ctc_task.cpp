#include "datasets/ctc_task.h"

#include <algorithm>

#include "engine/error.h"

namespace eng {

CTCTask::CTCTask(const CTCTaskOptions& opt) : opt_(opt) {
  ENG_CHECK(opt.phonemes >= 2, "ctc task: needs at least 2 phonemes (no phoneme repeats its predecessor), got ",
            opt.phonemes);
  ENG_CHECK(opt.features >= 1, "ctc task: features must be >= 1, got ", opt.features);
  ENG_CHECK(opt.min_labels >= 1 && opt.min_labels <= opt.max_labels, "ctc task: label counts [", opt.min_labels,
            ", ", opt.max_labels, "] must satisfy 1 <= min <= max");
  ENG_CHECK(opt.min_duration >= 1 && opt.min_duration <= opt.max_duration, "ctc task: durations [",
            opt.min_duration, ", ", opt.max_duration, "] must satisfy 1 <= min <= max");
  ENG_CHECK(opt.noise >= 0, "ctc task: noise must be >= 0, got ", opt.noise);
  Rng rng(opt.pattern_seed);
  patterns_.resize(size_t(opt.phonemes * opt.features));
  for (float& v : patterns_) v = float(rng.normal());
}

CTCBatch CTCTask::sample(const Rng& stream, int64_t first_row, int64_t batch) const {
  const int64_t F = opt_.features;
  std::vector<Rng> rows;
  for (int64_t i = 0; i < batch; ++i) rows.push_back(stream.fork(uint64_t(first_row + i)));
  // Draw every utterance first: the batch's tensors are as long as its longest one.
  std::vector<std::vector<int64_t>> labels(static_cast<size_t>(batch)), durations(static_cast<size_t>(batch));
  CTCBatch b;
  for (int64_t i = 0; i < batch; ++i) {
    Rng& rng = rows[size_t(i)];
    auto between = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng.below(uint64_t(hi - lo + 1))); };
    const int64_t n = between(opt_.min_labels, opt_.max_labels);
    int64_t frames = 0;
    for (int64_t k = 0; k < n; ++k) {
      // Uniform over the P - 1 phonemes that differ from the previous one.
      int64_t p = 1 + int64_t(rng.below(uint64_t(k == 0 ? opt_.phonemes : opt_.phonemes - 1)));
      if (k > 0 && p >= labels[size_t(i)].back()) ++p;
      labels[size_t(i)].push_back(p);
      durations[size_t(i)].push_back(between(opt_.min_duration, opt_.max_duration));
      frames += durations[size_t(i)].back();
    }
    b.frame_lengths.push_back(frames);
    b.label_lengths.push_back(n);
  }
  const int64_t T = *std::max_element(b.frame_lengths.begin(), b.frame_lengths.end());
  const int64_t S = *std::max_element(b.label_lengths.begin(), b.label_lengths.end());
  b.frames = zeros({batch, T, F});
  b.labels = zeros({batch, S}, DType::I64);
  for (int64_t i = 0; i < batch; ++i) {
    Rng& rng = rows[size_t(i)];  // the noise continues the row's stream
    float* row = b.frames.data<float>() + i * T * F;
    int64_t t = 0;
    for (size_t k = 0; k < labels[size_t(i)].size(); ++k) {
      const int64_t p = labels[size_t(i)][k];
      b.labels.data<int64_t>()[i * S + int64_t(k)] = p;
      for (int64_t d = 0; d < durations[size_t(i)][k]; ++d, ++t)
        for (int64_t f = 0; f < F; ++f) row[t * F + f] = pattern(p)[f] + float(opt_.noise * rng.normal());
    }
  }
  return b;
}

}  // namespace eng
