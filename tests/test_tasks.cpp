// The synthetic tasks of the dataset layer beyond copy / reverse / sort: associative recall and the
// speech-like CTC task, and images as pixel sequences.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "datasets/ctc_task.h"
#include "datasets/pixel_task.h"
#include "datasets/recall_task.h"
#include "engine/error.h"

using namespace eng;

TEST_CASE("recall task: distinct keys, the query repeats one key, the target is its value") {
  RecallTask task(6, 8, 5);
  CHECK(task.vocab() == 15);
  CHECK(task.seq_len() == 15);
  Rng rng(1);
  LMBatch b = task.sample(rng, 0, 64);
  REQUIRE(b.inputs.shape() == Shape{64, 15});
  std::set<int64_t> lengths;
  for (int64_t i = 0; i < 64; ++i) {
    std::vector<int64_t> row;
    for (int64_t t = 0; t < 15; ++t) row.push_back(int64_t(b.inputs.at({i, t})));
    int64_t n = 0;
    while (row[size_t(2 * n)] != RecallTask::kQuery) ++n;
    lengths.insert(n);
    std::set<int64_t> keys;
    for (int64_t k = 0; k < n; ++k) {
      CHECK(row[size_t(2 * k)] >= 2);
      CHECK(row[size_t(2 * k)] < 10);
      CHECK(row[size_t(2 * k + 1)] >= 10);
      CHECK(row[size_t(2 * k + 1)] < 15);
      keys.insert(row[size_t(2 * k)]);
    }
    CHECK(int64_t(keys.size()) == n);
    const int64_t q = row[size_t(2 * n + 1)];
    int64_t value = -1;
    for (int64_t k = 0; k < n; ++k)
      if (row[size_t(2 * k)] == q) value = row[size_t(2 * k + 1)];
    CHECK(value >= 0);
    CHECK(row[size_t(2 * n + 2)] == value);
    for (int64_t t = 0; t < 15; ++t)
      CHECK(int64_t(b.targets.at({i, t})) == (t == 2 * n + 1 ? value : kIgnore));
    for (int64_t t = 2 * n + 3; t < 15; ++t) CHECK(row[size_t(t)] == 0);
  }
  CHECK(lengths.size() == 6);  // every pair count from 1 to 6 occurs
  RecallTask fixed(3, 3, 2, true);
  Rng r2(2);
  LMBatch f = fixed.sample(r2, 0, 4);
  for (int64_t i = 0; i < 4; ++i) CHECK(f.inputs.at({i, 6}) == RecallTask::kQuery);
  CHECK_THROWS_WITH(RecallTask(5, 4), "recall task: keys must be distinct, so 5 pairs need at least 5 keys, got 4");
}

TEST_CASE("ctc task: frames are each phoneme's pattern plus noise, for its duration") {
  CTCTaskOptions opt;
  opt.phonemes = 5;
  opt.features = 4;
  opt.min_labels = 2;
  opt.max_labels = 4;
  opt.noise = 0;
  CTCTask task(opt);
  CHECK(task.classes() == 6);
  Rng rng(7);
  CTCBatch b = task.sample(rng, 0, 16);
  const int64_t T = b.frames.size(1), S = b.labels.size(1);
  CHECK(T == *std::max_element(b.frame_lengths.begin(), b.frame_lengths.end()));
  CHECK(S == *std::max_element(b.label_lengths.begin(), b.label_lengths.end()));
  CHECK(T <= task.max_frames());
  for (int64_t i = 0; i < 16; ++i) {
    const int64_t n = b.label_lengths[size_t(i)];
    CHECK(n >= 2);
    CHECK(n <= 4);
    // Without noise, the frames read back the labels: each run of equal frames is one phoneme's pattern,
    // 2..6 frames long, and neighbours differ.
    int64_t t = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t p = int64_t(b.labels.at({i, k}));
      CHECK(p >= 1);
      CHECK(p <= 5);
      if (k > 0) CHECK(p != int64_t(b.labels.at({i, k - 1})));
      int64_t d = 0;
      while (t < b.frame_lengths[size_t(i)] && b.frames.at({i, t, 0}) == task.pattern(p)[0]) {
        for (int64_t f = 1; f < 4; ++f) CHECK(b.frames.at({i, t, f}) == task.pattern(p)[f]);
        ++t;
        ++d;
      }
      CHECK(d >= 2);
      CHECK(d <= 6);
    }
    CHECK(t == b.frame_lengths[size_t(i)]);
    for (; t < T; ++t) CHECK(b.frames.at({i, t, 0}) == 0);  // padding
    for (int64_t k = n; k < S; ++k) CHECK(b.labels.at({i, k}) == 0);
  }
  // noise: with every duration 3, frame t shows phoneme t / 3; the deviations have deviation `noise`
  opt.noise = 0.5;
  opt.min_duration = opt.max_duration = 3;
  CTCTask noisy(opt);
  Rng r2(8);
  CTCBatch nb = noisy.sample(r2, 0, 64);
  double sq = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < 64; ++i) {
    CHECK(nb.frame_lengths[size_t(i)] == 3 * nb.label_lengths[size_t(i)]);
    for (int64_t t = 0; t < nb.frame_lengths[size_t(i)]; ++t)
      for (int64_t f = 0; f < 4; ++f) {
        const double dev = nb.frames.at({i, t, f}) - noisy.pattern(int64_t(nb.labels.at({i, t / 3})))[f];
        sq += dev * dev;
        ++count;
      }
  }
  CHECK(std::sqrt(sq / double(count)) == doctest::Approx(0.5).epsilon(0.1));
  // seeded: the same generator position gives the same batch
  Rng a(5), c(5);
  CHECK(noisy.sample(a, 0, 3).frames.to_vector() == noisy.sample(c, 0, 3).frames.to_vector());
  CHECK_THROWS_WITH(CTCTask(CTCTaskOptions{1, 4, 1, 2, 2, 6, 0.5, 1}),
                    "ctc task: needs at least 2 phonemes (no phoneme repeats its predecessor), got 1");
}

TEST_CASE("pixel task: raster-order targets, inputs shifted behind the start token, images back from tokens") {
  ImageDataset d;
  d.name = "tiny";
  d.channels = 2, d.height = 2, d.width = 3;
  for (int64_t n = 0; n < 3; ++n) {
    for (int64_t j = 0; j < 12; ++j) d.pixels.push_back(uint8_t(n * 50 + j));
    d.labels.push_back(uint8_t(n));
  }
  PixelTask task(d);
  CHECK(task.length() == 12);
  const LMBatch b = task.range(1, 2);
  CHECK(b.inputs.shape() == Shape{2, 12});
  for (int64_t i = 0; i < 2; ++i) {
    CHECK(b.inputs.at({i, 0}) == PixelTask::kStart);
    for (int64_t t = 0; t < 12; ++t) {
      CHECK(b.targets.at({i, t}) == double((i + 1) * 50 + t));  // channel-major raster order
      if (t > 0) CHECK(b.inputs.at({i, t}) == b.targets.at({i, t - 1}));
    }
  }
  const Tensor images = task.to_images(b.targets);
  CHECK(images.shape() == Shape{2, 2, 2, 3});
  CHECK(images.at({1, 1, 0, 2}) == double(100 + 6 + 2));
  Rng rng(3);
  const LMBatch s = task.sample(rng, 0, 5);
  for (int64_t i = 0; i < 5; ++i) CHECK(int64_t(s.targets.at({i, 0})) % 50 == 0);
  CHECK_THROWS_WITH(task.range(2, 2), "pixel task: images [2, 4) are outside tiny of 3");
  CHECK_THROWS_WITH(task.to_images(zeros({1, 5}, DType::I64)), "pixel task: tokens [1, 5] are not rows of 12 pixels");
}
