#include "datasets/pixel_task.h"

#include "engine/error.h"
#include "ops/view.h"

namespace eng {

LMBatch PixelTask::batch_of(const std::vector<int64_t>& indices) const {
  const ImageBatch b = gather(images_, indices);
  const int64_t B = int64_t(indices.size()), L = length();
  LMBatch out{empty({B, L}, DType::I64), reshape(b.pixels, {B, L}).contiguous()};
  const int64_t* px = out.targets.data<int64_t>();
  int64_t* in = out.inputs.data<int64_t>();
  for (int64_t i = 0; i < B; ++i) {
    in[i * L] = kStart;
    for (int64_t t = 1; t < L; ++t) in[i * L + t] = px[i * L + t - 1];
  }
  return out;
}

LMBatch PixelTask::sample(const Rng& stream, int64_t first_row, int64_t batch) const {
  return batch_of(sample_indices(images_, stream, first_row, batch));
}

LMBatch PixelTask::range(int64_t first, int64_t count) const {
  ENG_CHECK(first >= 0 && count >= 1 && first + count <= images_.size(), "pixel task: images [", first, ", ",
            first + count, ") are outside ", images_.name, " of ", images_.size());
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < count; ++i) idx.push_back(first + i);
  return batch_of(idx);
}

Tensor PixelTask::to_images(const Tensor& tokens) const {
  ENG_CHECK(tokens.dim() == 2 && tokens.size(1) == length(), "pixel task: tokens ", tokens.shape(),
            " are not rows of ", length(), " pixels");
  return reshape(tokens.contiguous(), {tokens.size(0), images_.channels, images_.height, images_.width});
}

}  // namespace eng
