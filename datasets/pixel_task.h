// Images as sequences for an autoregressive pixel model (Katharopoulos et al. 2020 §4.2.1, after PixelCNN-style
// raster-order models): an image's pixels in raster order (channel-major for colour) are the targets, and the
// inputs are the same sequence shifted right behind a start token, so position t predicts pixel t from pixels
// < t. Vocabulary: the 256 pixel values plus the start token (256). The loss in nats per pixel divided by ln 2
// is the bits/dim the paper reports.
#pragma once
#include <vector>

#include "datasets/image_dataset.h"
#include "datasets/lm_batch.h"
#include "engine/rng.h"

namespace eng {

class PixelTask {
 public:
  static constexpr int64_t kStart = 256;
  static constexpr int64_t kVocab = 257;

  explicit PixelTask(const ImageDataset& images) : images_(images) {}
  int64_t length() const { return images_.image_bytes(); }
  const ImageDataset& images() const { return images_; }

  // `batch` images drawn uniformly (with replacement) by `rng`.
  // Images drawn uniformly (with replacement): rows [first_row, first_row + batch) of a batch drawn from `stream`,
  // row g from stream.fork(g) alone.
  LMBatch sample(const Rng& stream, int64_t first_row, int64_t batch) const;
  // Images first .. first + count - 1, in order (evaluation over a whole split).
  LMBatch range(int64_t first, int64_t count) const;
  // Token rows [B, length] (pixel values 0..255) back to images [B, channels, height, width].
  Tensor to_images(const Tensor& tokens) const;

 private:
  LMBatch batch_of(const std::vector<int64_t>& indices) const;
  const ImageDataset& images_;
};

}  // namespace eng
