// MNIST and Fashion-MNIST: four IDX files in one directory (train-images-idx3-ubyte,
// train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte), each plain or .gz.
// Debian's package dataset-fashion-mnist installs Fashion-MNIST (gzipped) in kFashionMnistDir.
#pragma once
#include <string>

#include "datasets/image_dataset.h"

namespace eng {

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The directory to read: `data_dir` when not empty (a --data PATH, e.g. for MNIST proper), else
// kFashionMnistDir. Fails, saying how to get the data, when a file is missing there.
std::string locate_mnist(const std::string& data_dir);

// The path of file `base` in `dir`: base itself, else base + ".gz"; empty when neither exists.
std::string find_mnist_file(const std::string& dir, const std::string& base);

// Splits: train = the training file without its last `valid` images, valid = those last images (the
// files come shuffled, so the tail is a fair sample), test = the t10k files. Labels must be < 10 and
// each images file must match its labels file in count.
ImageSplits load_mnist(const std::string& dir, int64_t valid = 5000);

// One images file and its labels file as a dataset called `name`.
ImageDataset load_idx_pair(const std::string& images_path, const std::string& labels_path, const std::string& name);

}  // namespace eng
