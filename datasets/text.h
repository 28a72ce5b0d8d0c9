// A byte-level text corpus: any file, read as bytes (vocabulary 256, no tokenizer), split in order into
// train / validation / test. The rule is one formula: valid = test = floor(n / 20) bytes at the end,
// train the rest (90% / 5% / 5%); on enwik8's 100,000,000 bytes that is exactly its standard split
// (90M / 5M / 5M, Mahoney's Hutter-prize file as the literature uses it).
//
// Training batches are seeded random windows; evaluation walks consecutive windows so that bits per
// character cover the whole split (less the final partial window). For a model with a memory of earlier
// segments (Transformer-XL, models/xl_memory.h), streams cut the split into `batch` contiguous parts read
// segment after segment, so that each row of a batch continues the same row of the batch before.
#pragma once
#include <string>
#include <vector>

#include "datasets/lm_batch.h"
#include "engine/rng.h"

namespace eng {

enum class TextSplit { Train, Valid, Test };
const char* text_split_name(TextSplit s);

struct TextSplitSizes {
  int64_t train, valid, test;
};
TextSplitSizes text_split_sizes(int64_t n);

class TextCorpus {
 public:
  explicit TextCorpus(const std::string& path);
  static constexpr int64_t kVocab = 256;

  const std::string& path() const { return path_; }
  // Throws, naming the file and the split, unless every split holds a window of `len` + 1 bytes: checked before
  // training, so that a run never trains and then finds its validation or test split too short.
  void check_windows(int64_t len) const;
  int64_t size(TextSplit s) const { return end(s) - begin(s); }

  // `batch` windows of `len` + 1 bytes at uniform random starts in the split: inputs are the first len
  // bytes, targets the last len (next-byte prediction), both [batch, len] i64.
  LMBatch sample(TextSplit s, int64_t batch, int64_t len, Rng& rng) const;

  // Consecutive windows: window i predicts bytes i*len + 1 .. i*len + len of the split.
  int64_t num_windows(TextSplit s, int64_t len) const;
  LMBatch windows(TextSplit s, int64_t first, int64_t count, int64_t len) const;

  // Transformer-XL's ordered batches (its LMOrderedIterator): the split cut into `streams` contiguous streams of
  // floor(size / streams) bytes each (the remainder dropped); segment t holds bytes t*len .. t*len + len - 1 of
  // every stream as inputs and the byte after each as targets, [streams, len] i64. Row b of segment t + 1
  // continues row b of segment t. Segments whose last target would leave the stream are not made.
  int64_t num_stream_segments(TextSplit s, int64_t streams, int64_t len) const;
  LMBatch stream_segment(TextSplit s, int64_t streams, int64_t len, int64_t t) const;

 private:
  int64_t begin(TextSplit s) const;
  int64_t end(TextSplit s) const;
  void check_len(TextSplit s, int64_t len) const;

  std::string path_;
  std::vector<uint8_t> bytes_;
  TextSplitSizes sizes_;
};

}  // namespace eng
