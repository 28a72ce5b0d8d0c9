// Every sampler draws row g of a batch from its stream forked at g (Rng::fork): rows [0, B) drawn at once are the
// rows [0, b) and [b, B) drawn apart, bit for bit, so that a training step's data does not depend on how its batch
// is split into micro-batches or over ranks (tools/train/data_parallel.h).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "datasets/copy_task.h"
#include "datasets/ctc_task.h"
#include "datasets/image_dataset.h"
#include "datasets/pixel_task.h"
#include "datasets/recall_task.h"
#include "datasets/seq2seq_tasks.h"
#include "datasets/text.h"
#include "ops/index.h"
#include "ops/view.h"
#include "tests/temp_files.h"

using namespace eng;

namespace {

constexpr int64_t kRows = 7;

// The rows of `draw(first, count)` for [0, kRows) and for the splits at 1, 3 and 6, concatenated along dim 0.
template <class Draw>
void check_splits(Draw draw) {
  const std::vector<double> whole = draw(0, kRows).to_vector();
  for (int64_t b : {1, 3, 6}) {
    const Tensor parts = concat({draw(0, b), draw(b, kRows - b)}, 0);
    CHECK(parts.to_vector() == whole);
  }
}

const Rng kStream(2026, 5);

}  // namespace

TEST_CASE("batch rows: copy, recall, reverse and pixel rows do not depend on the split") {
  const CopyTask copy(12, 5);
  check_splits([&](int64_t f, int64_t n) { return copy.sample(kStream, f, n).inputs; });
  check_splits([&](int64_t f, int64_t n) { return copy.sample(kStream, f, n).targets; });
  const RecallTask recall(4, 6, 3);
  check_splits([&](int64_t f, int64_t n) { return recall.sample(kStream, f, n).inputs; });
  const Seq2SeqTask reverse(Seq2SeqTask::Kind::Reverse, 8);
  check_splits([&](int64_t f, int64_t n) { return reverse.sample(kStream, f, n).src; });
  check_splits([&](int64_t f, int64_t n) { return reverse.sample(kStream, f, n).tgt_out; });
  ImageDataset d;
  d.name = "tiny";
  d.height = 2, d.width = 2;
  for (int64_t n = 0; n < 50; ++n) {
    for (int64_t j = 0; j < 4; ++j) d.pixels.push_back(uint8_t(n + j));
    d.labels.push_back(uint8_t(n % 10));
  }
  const PixelTask pixels(d);
  check_splits([&](int64_t f, int64_t n) { return pixels.sample(kStream, f, n).targets; });
  check_splits([&](int64_t f, int64_t n) {
    const std::vector<int64_t> idx = sample_indices(d, kStream, f, n);
    return from_vector(std::vector<double>(idx.begin(), idx.end()), {n}, DType::I64);
  });
  // and another step's stream draws other rows
  CHECK(copy.sample(kStream, 0, kRows).inputs.to_vector() != copy.sample(Rng(2026, 6), 0, kRows).inputs.to_vector());
}

TEST_CASE("batch rows: text windows do not depend on the split") {
  test::TempDir dir;
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 2000; ++i) bytes.push_back(uint8_t('a' + (i * 7 + i / 26) % 26));
  test::write_file(dir.file("t.txt"), bytes);
  const TextCorpus corpus(dir.file("t.txt"));
  check_splits([&](int64_t f, int64_t n) { return corpus.sample(TextSplit::Train, kStream, f, n, 16).inputs; });
}

// Utterances are padded to the longest of the rows drawn together: the rows compare on their own lengths.
TEST_CASE("batch rows: ctc utterances (frames with noise, labels) do not depend on the split") {
  CTCTaskOptions opt;
  opt.phonemes = 5;
  opt.features = 3;
  opt.noise = 0.5;
  const CTCTask task(opt);
  const CTCBatch whole = task.sample(kStream, 0, kRows);
  for (int64_t b : {1, 3, 6}) {
    const CTCBatch parts[2] = {task.sample(kStream, 0, b), task.sample(kStream, b, kRows - b)};
    for (int64_t g = 0; g < kRows; ++g) {
      const CTCBatch& p = parts[g < b ? 0 : 1];
      const int64_t i = g < b ? g : g - b;
      REQUIRE(p.frame_lengths[size_t(i)] == whole.frame_lengths[size_t(g)]);
      REQUIRE(p.label_lengths[size_t(i)] == whole.label_lengths[size_t(g)]);
      const int64_t T = whole.frame_lengths[size_t(g)], S = whole.label_lengths[size_t(g)];
      CHECK(narrow(narrow(p.frames, 0, i, 1), 1, 0, T).contiguous().to_vector() ==
            narrow(narrow(whole.frames, 0, g, 1), 1, 0, T).contiguous().to_vector());
      CHECK(narrow(narrow(p.labels, 0, i, 1), 1, 0, S).contiguous().to_vector() ==
            narrow(narrow(whole.labels, 0, g, 1), 1, 0, S).contiguous().to_vector());
    }
  }
}
