// The file readers: IDX (plain and gzipped), MNIST splits, CIFAR-10 batches, byte-level text; each
// fails naming the file and the problem. Also batching: gather, splits, the seeded sampler.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <set>

#include "datasets/batch_sampler.h"
#include "engine/checksum.h"
#include "datasets/cifar10.h"
#include "datasets/idx.h"
#include "datasets/mnist.h"
#include "datasets/text.h"
#include "engine/error.h"
#include "tests/skip_note.h"
#include "tests/temp_files.h"

using namespace eng;
using eng::test::TempDir;
using eng::test::write_file;

namespace {

std::vector<uint8_t> idx_file(uint8_t ndim, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> f = {0, 0, 0x08, ndim};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) f.push_back(uint8_t(d >> s));
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

std::vector<uint8_t> iota_bytes(size_t n, uint8_t mod = 251) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i % mod);
  return v;
}

// A gzip member holding `data` in stored DEFLATE blocks (the reader must not care how it was compressed).
std::vector<uint8_t> gzip_stored(const std::vector<uint8_t>& data) {
  std::vector<uint8_t> g = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(data.size() - pos, 65535);
    g.insert(g.end(), {uint8_t(pos + n == data.size()), uint8_t(n), uint8_t(n >> 8), uint8_t(~n), uint8_t(~n >> 8)});
    g.insert(g.end(), data.begin() + std::ptrdiff_t(pos), data.begin() + std::ptrdiff_t(pos + n));
    pos += n;
  } while (pos < data.size());
  for (uint32_t v : {crc32(data.data(), data.size()), uint32_t(data.size())})
    for (int s = 0; s < 32; s += 8) g.push_back(uint8_t(v >> s));
  return g;
}

// A directory of MNIST-format files: n_train / n_test images of 3x2 pixels, label i % 10.
void write_mnist(const TempDir& dir, uint32_t n_train, uint32_t n_test, bool gz) {
  auto put = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    write_file(dir.file(name + (gz ? ".gz" : "")), gz ? gzip_stored(bytes) : bytes);
  };
  const std::vector<std::pair<std::string, uint32_t>> files = {{"train", n_train}, {"t10k", n_test}};
  for (const auto& file : files) {
    const std::string& prefix = file.first;
    const uint32_t n = file.second;
    std::vector<uint8_t> labels(n);
    for (uint32_t i = 0; i < n; ++i) labels[i] = uint8_t(i % 10);
    put(prefix + "-images-idx3-ubyte", idx_file(3, {n, 3, 2}, iota_bytes(n * 6)));
    put(prefix + "-labels-idx1-ubyte", idx_file(1, {n}, labels));
  }
}

}  // namespace

TEST_CASE("idx: reads images and labels, plain or gzipped") {
  TempDir dir;
  const std::vector<uint8_t> pixels = iota_bytes(70000 * 1 * 2);  // over one stored block when gzipped
  write_file(dir.file("img"), idx_file(3, {70000, 1, 2}, pixels));
  write_file(dir.file("img.gz"), gzip_stored(idx_file(3, {70000, 1, 2}, pixels)));
  for (const char* name : {"img", "img.gz"}) {
    IdxArray a = read_idx(dir.file(name), 3);
    CHECK(a.shape == Shape{70000, 1, 2});
    CHECK(a.data == pixels);
  }
  write_file(dir.file("lab"), idx_file(1, {3}, {7, 0, 9}));
  CHECK(read_idx(dir.file("lab"), 1).data == std::vector<uint8_t>{7, 0, 9});
  write_file(dir.file("empty"), idx_file(1, {0}, {}));
  CHECK(read_idx(dir.file("empty"), 1).shape == Shape{0});
}

TEST_CASE("idx: wrong magic, type, dimensions or size fail naming the file") {
  TempDir dir;
  const std::string f = dir.file("bad");
  auto expect = [&](const std::vector<uint8_t>& bytes, int64_t ndim, const std::string& msg) {
    write_file(f, bytes);
    CHECK_THROWS_WITH(read_idx(f, ndim), ("idx: " + f + ": " + msg).c_str());
  };
  expect({1, 0, 8, 3}, 3, "bad magic 0x01000803: not an IDX file (expected 0x00000803)");
  expect({0, 0}, 1, "file of 2 bytes is too short for the 4-byte magic");
  expect({0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0, 0}, 1,
         "element type 0x0000000d (f32) is not supported: only unsigned bytes (0x08)");
  expect(idx_file(1, {4}, {1, 2, 3, 4}), 3,
         "magic 0x00000801 declares 1 dimensions, expected 3 (magic 0x00000803)");
  expect({0, 0, 8, 3, 0, 0, 0, 1, 0, 0}, 3, "file of 10 bytes is truncated inside its 16-byte header");
  expect(idx_file(3, {2, 2, 2}, iota_bytes(7)), 3, "truncated: sizes [2, 2, 2] need 8 data bytes, the file holds 7");
  expect(idx_file(1, {2}, {1, 2, 3}), 1, "1 bytes follow the 2 data bytes that sizes [2] need");
  // a gzip file cut short: the decompressor names the file
  std::vector<uint8_t> gz = gzip_stored(idx_file(1, {100}, iota_bytes(100)));
  gz.resize(gz.size() - 30);
  write_file(f, gz);
  CHECK_THROWS_WITH(read_idx(f, 1),
                    ("inflate: " + f + ": truncated DEFLATE data (the input ends inside a block)").c_str());
  CHECK_THROWS_WITH(read_idx(dir.file("missing"), 1),
                    ("idx: " + dir.file("missing") + ": cannot open: No such file or directory").c_str());
  CHECK_THROWS_WITH(read_idx(dir.path, 1), ("idx: " + dir.path + ": is a directory, not a regular file").c_str());
}

TEST_CASE("mnist: splits, validation carved from the end of train, and clear errors") {
  for (bool gz : {false, true}) {
    TempDir dir;
    write_mnist(dir, 30, 12, gz);
    CHECK(locate_mnist(dir.path) == dir.path);
    ImageSplits s = load_mnist(dir.path, 5);
    CHECK(s.train.size() == 25);
    CHECK(s.valid.size() == 5);
    CHECK(s.test.size() == 12);
    CHECK(s.train.height == 3);
    CHECK(s.train.width == 2);
    CHECK(s.valid.labels == std::vector<uint8_t>{5, 6, 7, 8, 9});  // images 25..29 of the training file
    CHECK(s.valid.pixels[0] == uint8_t(25 * 6 % 251));
  }
  TempDir dir;
  write_mnist(dir, 30, 12, false);
  // counts disagree
  write_file(dir.file("t10k-labels-idx1-ubyte"), idx_file(1, {11}, iota_bytes(11, 10)));
  CHECK_THROWS_WITH(load_mnist(dir.path), ("mnist: " + dir.file("t10k-images-idx3-ubyte") + " holds 12 images but " +
                                           dir.file("t10k-labels-idx1-ubyte") + " holds 11 labels")
                                              .c_str());
  // a label that is no class
  write_file(dir.file("t10k-labels-idx1-ubyte"), idx_file(1, {12}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0}));
  const std::string labels = dir.file("t10k-labels-idx1-ubyte");
  CHECK_THROWS_WITH(load_mnist(dir.path), ("mnist: " + labels + ": label 10 of image 10 is not a class 0..9").c_str());
  // more validation images than training images
  write_mnist(dir, 30, 12, false);
  CHECK_THROWS_WITH(load_mnist(dir.path, 30), doctest::Contains("split: cannot carve 30 images from"));
  // a missing file: --data names what is missing; the default location says how to install
  std::filesystem::remove(dir.file("train-labels-idx1-ubyte"));
  CHECK_THROWS_WITH(locate_mnist(dir.path),
                    ("mnist: --data " + dir.path +
                     " has no train-labels-idx1-ubyte[.gz] (a directory with the four MNIST-format files is needed)")
                        .c_str());
  if (find_mnist_file(kFashionMnistDir, "train-images-idx3-ubyte").empty())
    CHECK_THROWS_WITH(locate_mnist(""),
                      doctest::Contains("run `make data` or `apt-get install dataset-fashion-mnist`"));
}

TEST_CASE("mnist: the real Fashion-MNIST, when installed") {
  if (find_mnist_file(kFashionMnistDir, "t10k-images-idx3-ubyte").empty()) {
    eng::test::note_skip("the real Fashion-MNIST: not installed (make data, or apt-get install dataset-fashion-mnist)");
    return;
  }
  const std::string dir = locate_mnist("");
  CHECK(dir == kFashionMnistDir);
  // the test files only: the training files take seconds to inflate under the sanitizers
  ImageDataset test = load_idx_pair(find_mnist_file(dir, "t10k-images-idx3-ubyte"),
                                    find_mnist_file(dir, "t10k-labels-idx1-ubyte"), "fashion-mnist test");
  CHECK(test.size() == 10000);
  CHECK(test.height == 28);
  CHECK(test.width == 28);
  std::vector<int> per_class(10, 0);
  for (uint8_t l : test.labels) ++per_class[l];
  CHECK(per_class == std::vector<int>(10, 1000));  // Fashion-MNIST's test set is balanced
  // garments on a black background: the corner pixels are mostly 0, the centre mostly not
  int64_t corner = 0, centre = 0;
  for (int64_t i = 0; i < test.size(); ++i) {
    corner += test.pixels[size_t(i * 784)] == 0;
    centre += test.pixels[size_t(i * 784 + 14 * 28 + 14)] != 0;
  }
  CHECK(corner > 9000);
  CHECK(centre > 7000);
}

TEST_CASE("cifar10: records, splits, and errors naming the file") {
  TempDir dir;
  auto batch = [](int64_t n, uint8_t first_label) {
    std::vector<uint8_t> b;
    for (int64_t i = 0; i < n; ++i) {
      b.push_back(uint8_t((first_label + i) % 10));
      std::vector<uint8_t> px = iota_bytes(3072);
      px[0] = uint8_t(i);
      b.insert(b.end(), px.begin(), px.end());
    }
    return b;
  };
  for (int k = 1; k <= 5; ++k) write_file(dir.file("data_batch_" + std::to_string(k) + ".bin"), batch(4, uint8_t(k)));
  write_file(dir.file("test_batch.bin"), batch(3, 0));
  CHECK(locate_cifar10(dir.path) == dir.path);
  ImageSplits s = load_cifar10(locate_cifar10(dir.path), 6);
  CHECK(s.train.size() == 14);
  CHECK(s.valid.size() == 6);
  CHECK(s.test.size() == 3);
  CHECK(s.test.channels == 3);
  CHECK(s.test.labels == std::vector<uint8_t>{0, 1, 2});
  ImageBatch b = gather(s.test, {2, 0});
  CHECK(b.pixels.shape() == Shape{2, 3, 32, 32});
  CHECK(b.pixels.at({0, 0, 0, 0}) == 2);             // the record's own first pixel
  CHECK(b.pixels.at({1, 2, 31, 31}) == 3071 % 251);  // blue plane, last pixel
  CHECK(b.labels.to_vector() == std::vector<double>{2, 0});

  const std::string f = dir.file("test_batch.bin");
  std::vector<uint8_t> bytes = batch(2, 0);
  bytes.pop_back();
  write_file(f, bytes);
  CHECK_THROWS_WITH(read_cifar10_batch(f, "t"),
                    ("cifar10: " + f +
                     ": size 6145 bytes is not a positive multiple of the 3073-byte record (1 label + 3072 pixels) "
                     "(truncated or not a CIFAR-10 binary batch?)")
                        .c_str());
  bytes = batch(2, 0);
  bytes[3073] = 17;
  write_file(f, bytes);
  CHECK_THROWS_WITH(read_cifar10_batch(f, "t"),
                    ("cifar10: " + f + ": record 1 has label 17, not a class 0..9 (a CIFAR-100 file, or corrupt?)")
                        .c_str());
  write_file(f, {});
  CHECK_THROWS_WITH(read_cifar10_batch(f, "t"), doctest::Contains("size 0 bytes is not a positive multiple"));
  std::filesystem::remove(f);
  CHECK_THROWS_WITH(locate_cifar10(dir.path), doctest::Contains("download cifar-10-binary.tar.gz"));
  CHECK_THROWS_WITH(locate_cifar10(""), doctest::Contains("no data directory given"));
}

TEST_CASE("images: gather, split_off_last and append check their arguments") {
  ImageDataset a;
  a.name = "a";
  a.height = a.width = 2;
  a.pixels = iota_bytes(12);
  a.labels = {1, 2, 3};
  CHECK_THROWS_WITH(gather(a, {3}), "gather: index 3 out of range for a of 3 images");
  ImageDataset tail = split_off_last(a, 1, "tail");
  CHECK(a.size() == 2);
  CHECK(tail.pixels == std::vector<uint8_t>{8, 9, 10, 11});
  ImageDataset rgb = a;
  rgb.name = "rgb";
  rgb.channels = 3;
  CHECK_THROWS_WITH(append(a, rgb), "append: rgb holds 3x2x2 images of 10 classes, a 1x2x2 of 10");
  append(a, tail);
  CHECK(a.labels == std::vector<uint8_t>{1, 2, 3});
}

TEST_CASE("batch sampler: every epoch a seeded permutation; batches cross epochs; state resumes") {
  BatchSampler s(10, 42);
  std::vector<int64_t> seen;
  for (int i = 0; i < 5; ++i) {
    std::vector<int64_t> b = s.next(4);
    CHECK(b.size() == 4);
    seen.insert(seen.end(), b.begin(), b.end());
  }
  for (int e = 0; e < 2; ++e) {  // 20 indices = two whole epochs, each a permutation of 0..9
    std::vector<int64_t> epoch(seen.begin() + 10 * e, seen.begin() + 10 * (e + 1));
    std::sort(epoch.begin(), epoch.end());
    std::vector<int64_t> all(10);
    std::iota(all.begin(), all.end(), 0);
    CHECK(epoch == all);
  }
  CHECK(!std::equal(seen.begin(), seen.begin() + 10, seen.begin() + 10));  // epochs differ
  CHECK(s.epoch() == 1);
  CHECK(s.cursor() == 10);
  BatchSampler again(10, 42);
  again.set_state(0, 6);
  std::vector<int64_t> rest = again.next(8);
  CHECK(rest == std::vector<int64_t>(seen.begin() + 6, seen.begin() + 14));
  BatchSampler other(10, 43);
  CHECK(other.next(10) != std::vector<int64_t>(seen.begin(), seen.begin() + 10));
  CHECK_THROWS_WITH(again.set_state(0, 11), "batch sampler: state (epoch 0, cursor 11) is invalid for 10 examples");
}

TEST_CASE("text: the 90/5/5 split, enwik8's exactly; random and consecutive windows") {
  const TextSplitSizes enwik8 = text_split_sizes(100'000'000);
  CHECK(enwik8.train == 90'000'000);
  CHECK(enwik8.valid == 5'000'000);
  CHECK(enwik8.test == 5'000'000);
  TempDir dir;
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t('a' + i % 26);
  write_file(dir.file("t.txt"), bytes);
  TextCorpus c(dir.file("t.txt"));
  CHECK(c.size(TextSplit::Train) == 900);
  CHECK(c.size(TextSplit::Valid) == 50);
  CHECK(c.size(TextSplit::Test) == 50);
  Rng rng(3);
  LMBatch b = c.sample(TextSplit::Valid, rng, 0, 4, 10);
  CHECK(b.inputs.shape() == Shape{4, 10});
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t first = int64_t(b.inputs.at({i, 0}));
    // inside the valid split (bytes 900..949), consecutive, targets shifted by one
    for (int64_t t = 0; t < 10; ++t) {
      CHECK(int64_t(b.inputs.at({i, t})) == 'a' + (first - 'a' + t) % 26);
      CHECK(int64_t(b.targets.at({i, t})) == 'a' + (first - 'a' + t + 1) % 26);
    }
  }
  CHECK(c.num_windows(TextSplit::Test, 7) == 7);  // (50 - 1) / 7
  LMBatch w = c.windows(TextSplit::Test, 1, 2, 7);
  CHECK(w.inputs.at({0, 0}) == 'a' + (950 + 7) % 26);
  CHECK(w.targets.at({1, 6}) == 'a' + (950 + 14 + 7) % 26);
  const std::string t = "text: " + dir.file("t.txt") + ": ";
  CHECK_THROWS_WITH(c.windows(TextSplit::Test, 6, 2, 7),
                    (t + "windows [6, 8) of 7 bytes are outside the 7 of the test split").c_str());
  CHECK_THROWS_WITH(c.sample(TextSplit::Valid, rng, 0, 1, 50),
                    (t + "the valid split holds 50 bytes, too few for a window of 50 + 1").c_str());
  write_file(dir.file("short"), iota_bytes(39));
  const std::string s = "text: " + dir.file("short") + ": ";
  CHECK_THROWS_WITH(TextCorpus(dir.file("short")),
                    (s + "39 bytes; a corpus needs 40 bytes (so that each split holds two) to 4 GiB").c_str());
}
