// Labelled images as the files store them, bytes [n, channels, height, width] and a label byte each,
// shared by the IDX (MNIST, Fashion-MNIST) and CIFAR-10 readers. A batch copies the chosen images into
// i64 tensors: pixel values 0..255 are the tokens of an autoregressive pixel model, and a classifier
// takes pixels.to(DType::F32) scaled by 1/255.
#pragma once
#include <string>
#include <vector>

#include "engine/rng.h"
#include "engine/tensor.h"

namespace eng {

struct ImageDataset {
  std::string name;  // where the images came from, for messages: "fashion-mnist train"
  int64_t channels = 1, height = 0, width = 0, classes = 10;
  std::vector<uint8_t> pixels;  // [n, channels, height, width]
  std::vector<uint8_t> labels;  // [n], each < classes

  int64_t size() const { return int64_t(labels.size()); }
  int64_t image_bytes() const { return channels * height * width; }
};

struct ImageBatch {
  Tensor pixels;  // [B, channels, height, width] i64, values 0..255
  Tensor labels;  // [B] i64
};

// The images at `indices` (each in [0, size)), in that order.
ImageBatch gather(const ImageDataset& data, const std::vector<int64_t>& indices);
// Images drawn uniformly (with replacement) as rows [first_row, first_row + batch) of a batch drawn from `stream`:
// row g's index from stream.fork(g). Throws when `data` holds no images.
std::vector<int64_t> sample_indices(const ImageDataset& data, const Rng& stream, int64_t first_row, int64_t batch);

// Moves the last `count` images of `from` into a new dataset called `name` (how a validation split is
// carved from a training file).
ImageDataset split_off_last(ImageDataset& from, int64_t count, const std::string& name);

// Appends `more` to `to`; their image geometry and class count must match.
void append(ImageDataset& to, const ImageDataset& more);

struct ImageSplits {
  ImageDataset train, valid, test;
};

}  // namespace eng
