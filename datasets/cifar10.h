// CIFAR-10, binary version (the cifar-10-batches-bin directory of cifar-10-binary.tar.gz from
// https://www.cs.toronto.edu/~kriz/cifar.html): data_batch_1.bin .. data_batch_5.bin (10,000 images
// each) and test_batch.bin. A record is 1 label byte (0..9) and 3072 pixel bytes (the 32x32 red plane,
// then green, then blue, each row-major), so a file's size is a multiple of 3073. No Debian package
// ships it, so there is no default location: the tools take --data DIR.
#pragma once
#include <string>

#include "datasets/image_dataset.h"

namespace eng {

constexpr int64_t kCifarRecordBytes = 1 + 3 * 32 * 32;

// One batch file as a dataset called `name`; fails, naming the file, on a size that is not a whole
// number of records or a label above 9.
ImageDataset read_cifar10_batch(const std::string& path, const std::string& name);

// `data_dir` itself or its cifar-10-batches-bin subdirectory, whichever holds the six files; fails,
// saying where to download them, otherwise.
std::string locate_cifar10(const std::string& data_dir);

// Splits: train = data batches 1-5 without their last `valid` images, valid = those images, test =
// test_batch.bin.
ImageSplits load_cifar10(const std::string& dir, int64_t valid = 5000);

}  // namespace eng
