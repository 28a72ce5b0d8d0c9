#include "datasets/cifar10.h"

#include <algorithm>
#include <filesystem>

#include "engine/file_io.h"
#include "engine/error.h"

namespace eng {

namespace {

const std::vector<std::string> kFiles = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                         "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};

std::string join(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

bool holds_all(const std::string& dir) {
  std::error_code ec;
  for (const std::string& f : kFiles)
    if (!std::filesystem::is_regular_file(join(dir, f), ec)) return false;
  return true;
}

}  // namespace

ImageDataset read_cifar10_batch(const std::string& path, const std::string& name) {
  std::vector<uint8_t> bytes = read_file_bytes(path, "cifar10");
  const int64_t size = int64_t(bytes.size());
  ENG_CHECK(size > 0 && size % kCifarRecordBytes == 0, "cifar10: ", path, ": size ", size,
            " bytes is not a positive multiple of the ", kCifarRecordBytes, "-byte record (1 label + 3072 pixels)",
            size % kCifarRecordBytes ? " (truncated or not a CIFAR-10 binary batch?)" : "");
  const int64_t n = size / kCifarRecordBytes, D = kCifarRecordBytes - 1;
  ImageDataset d;
  d.name = name;
  d.channels = 3;
  d.height = d.width = 32;
  d.pixels.resize(size_t(n * D));
  d.labels.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* rec = bytes.data() + i * kCifarRecordBytes;
    ENG_CHECK(rec[0] < 10, "cifar10: ", path, ": record ", i, " has label ", int(rec[0]),
              ", not a class 0..9 (a CIFAR-100 file, or corrupt?)");
    d.labels[size_t(i)] = rec[0];
    std::copy(rec + 1, rec + kCifarRecordBytes, d.pixels.begin() + i * D);
  }
  return d;
}

std::string locate_cifar10(const std::string& data_dir) {
  ENG_CHECK(!data_dir.empty(), "cifar10: no data directory given; download cifar-10-binary.tar.gz from "
                               "https://www.cs.toronto.edu/~kriz/cifar.html, unpack it and pass --data DIR");
  for (const std::string& dir : {data_dir, join(data_dir, "cifar-10-batches-bin")})
    if (holds_all(dir)) return dir;
  fail("cifar10: ", data_dir, " (nor its cifar-10-batches-bin) holds data_batch_1.bin .. data_batch_5.bin and "
       "test_batch.bin; download cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html");
}

ImageSplits load_cifar10(const std::string& dir, int64_t valid) {
  ImageSplits s;
  s.train = read_cifar10_batch(join(dir, kFiles[0]), dir + " train");
  for (size_t i = 1; i < 5; ++i) append(s.train, read_cifar10_batch(join(dir, kFiles[i]), kFiles[i]));
  s.test = read_cifar10_batch(join(dir, kFiles[5]), dir + " test");
  s.valid = split_off_last(s.train, valid, dir + " valid");
  return s;
}

}  // namespace eng
