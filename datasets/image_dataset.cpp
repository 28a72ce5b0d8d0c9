#include "datasets/image_dataset.h"

#include "engine/error.h"

namespace eng {

ImageBatch gather(const ImageDataset& data, const std::vector<int64_t>& indices) {
  const int64_t B = int64_t(indices.size()), D = data.image_bytes();
  ImageBatch b{empty({B, data.channels, data.height, data.width}, DType::I64), empty({B}, DType::I64)};
  int64_t* px = b.pixels.data<int64_t>();
  int64_t* lb = b.labels.data<int64_t>();
  for (int64_t i = 0; i < B; ++i) {
    const int64_t k = indices[size_t(i)];
    ENG_CHECK(k >= 0 && k < data.size(), "gather: index ", k, " out of range for ", data.name, " of ", data.size(),
              " images");
    const uint8_t* src = data.pixels.data() + k * D;
    for (int64_t j = 0; j < D; ++j) px[i * D + j] = src[j];
    lb[i] = data.labels[size_t(k)];
  }
  return b;
}

std::vector<int64_t> sample_indices(const ImageDataset& data, const Rng& stream, int64_t first_row, int64_t batch) {
  ENG_CHECK(data.size() > 0, "images: ", data.name, " holds no images");
  std::vector<int64_t> idx(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i)
    idx[size_t(i)] = int64_t(stream.fork(uint64_t(first_row + i)).below(uint64_t(data.size())));
  return idx;
}

ImageDataset split_off_last(ImageDataset& from, int64_t count, const std::string& name) {
  ENG_CHECK(count >= 0 && count < from.size(), "split: cannot carve ", count, " images from ", from.name, " of ",
            from.size(), " (at least one must stay)");
  ImageDataset out = from;
  out.name = name;
  const int64_t keep = from.size() - count, D = from.image_bytes();
  out.pixels.assign(from.pixels.begin() + keep * D, from.pixels.end());
  out.labels.assign(from.labels.begin() + keep, from.labels.end());
  from.pixels.resize(size_t(keep * D));
  from.labels.resize(size_t(keep));
  return out;
}

void append(ImageDataset& to, const ImageDataset& more) {
  ENG_CHECK(to.channels == more.channels && to.height == more.height && to.width == more.width &&
                to.classes == more.classes,
            "append: ", more.name, " holds ", more.channels, "x", more.height, "x", more.width, " images of ",
            more.classes, " classes, ", to.name, " ", to.channels, "x", to.height, "x", to.width, " of ", to.classes);
  to.pixels.insert(to.pixels.end(), more.pixels.begin(), more.pixels.end());
  to.labels.insert(to.labels.end(), more.labels.begin(), more.labels.end());
}

}  // namespace eng
