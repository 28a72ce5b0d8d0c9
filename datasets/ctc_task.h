// A synthetic speech-like task for CTC (the seed paper's WSJ cannot be had here). An utterance is a
// random phoneme sequence (labels 1..P, 0 being the CTC blank, ctc_loss's default); each phoneme is
// rendered as d frames, d uniform in [min_duration, max_duration], of that phoneme's fixed pattern (a
// random N(0, 1) vector of F features drawn once from pattern_seed: the task's "language") plus
// N(0, noise^2) noise on every frame and feature. A phoneme never repeats its predecessor: two equal
// phonemes back to back would render as one long one, and the task has no transitions to tell them
// apart. The model sees frames and must emit the labels, with P + 1 output classes.
#pragma once
#include <vector>

#include "engine/rng.h"
#include "engine/tensor.h"

namespace eng {

struct CTCBatch {
  Tensor frames;                        // [B, T, F] f32, T the longest utterance of the batch, 0 after each end
  std::vector<int64_t> frame_lengths;   // [B]
  Tensor labels;                        // [B, S] i64, S the most labels of the batch, padded with 0
  std::vector<int64_t> label_lengths;   // [B]
};

struct CTCTaskOptions {
  int64_t phonemes = 20, features = 16;
  int64_t min_labels = 4, max_labels = 12;
  int64_t min_duration = 2, max_duration = 6;
  double noise = 0.5;
  uint64_t pattern_seed = 1;
};

class CTCTask {
 public:
  explicit CTCTask(const CTCTaskOptions& opt = {});
  // Rows [first_row, first_row + batch) of a batch drawn from `stream`: row g from stream.fork(g) alone. The
  // tensors are padded to the longest utterance of these rows.
  CTCBatch sample(const Rng& stream, int64_t first_row, int64_t batch) const;
  int64_t classes() const { return opt_.phonemes + 1; }
  int64_t features() const { return opt_.features; }
  int64_t max_frames() const { return opt_.max_labels * opt_.max_duration; }
  // The pattern of phoneme p (1..P): F values.
  const float* pattern(int64_t p) const { return patterns_.data() + (p - 1) * opt_.features; }

 private:
  CTCTaskOptions opt_;
  std::vector<float> patterns_;  // [P, F]
};

}  // namespace eng
