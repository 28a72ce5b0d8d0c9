#include "datasets/mnist.h"

#include <filesystem>

#include "datasets/idx.h"
#include "engine/error.h"

namespace eng {

namespace {

constexpr const char* kFiles[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                   "t10k-labels-idx1-ubyte"};

}  // namespace

std::string find_mnist_file(const std::string& dir, const std::string& base) {
  std::error_code ec;
  for (const std::string& name : {base, base + ".gz"}) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    if (std::filesystem::is_regular_file(path, ec)) return path;
  }
  return "";
}

std::string locate_mnist(const std::string& data_dir) {
  const std::string dir = data_dir.empty() ? kFashionMnistDir : data_dir;
  for (const char* base : kFiles)
    if (find_mnist_file(dir, base).empty()) {
      if (data_dir.empty())
        fail("mnist: Fashion-MNIST is not installed: ", dir, " has no ", base,
             "[.gz]; run `make data` or `apt-get install dataset-fashion-mnist`, or pass --data DIR with the four "
             "MNIST-format files");
      fail("mnist: --data ", dir, " has no ", base, "[.gz] (a directory with the four MNIST-format files is needed)");
    }
  return dir;
}

ImageDataset load_idx_pair(const std::string& images_path, const std::string& labels_path, const std::string& name) {
  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);
  ENG_CHECK(images.shape[0] == labels.shape[0], "mnist: ", images_path, " holds ", images.shape[0], " images but ",
            labels_path, " holds ", labels.shape[0], " labels");
  for (size_t i = 0; i < labels.data.size(); ++i)
    ENG_CHECK(labels.data[i] < 10, "mnist: ", labels_path, ": label ", int(labels.data[i]), " of image ", i,
              " is not a class 0..9");
  ImageDataset d;
  d.name = name;
  d.height = images.shape[1];
  d.width = images.shape[2];
  d.pixels = std::move(images.data);
  d.labels = std::move(labels.data);
  return d;
}

ImageSplits load_mnist(const std::string& dir, int64_t valid) {
  auto path = [&](int i) {
    std::string p = find_mnist_file(dir, kFiles[i]);
    ENG_CHECK(!p.empty(), "mnist: ", dir, " has no ", kFiles[i], "[.gz]");
    return p;
  };
  ImageSplits s;
  s.train = load_idx_pair(path(0), path(1), dir + " train");
  s.test = load_idx_pair(path(2), path(3), dir + " test");
  ENG_CHECK(s.train.height == s.test.height && s.train.width == s.test.width, "mnist: ", dir, ": training images are ",
            s.train.height, "x", s.train.width, " but test images ", s.test.height, "x", s.test.width);
  s.valid = split_off_last(s.train, valid, dir + " valid");
  return s;
}

}  // namespace eng
