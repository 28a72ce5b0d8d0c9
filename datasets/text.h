// A text corpus: any file, read as bytes (vocabulary 256) or, given a tokenizer (datasets/tokenizer.h), as its
// tokens; split in order into train / validation / test. The rule is one formula on bytes: valid = test =
// floor(n / 20) bytes at the end, train the rest (90% / 5% / 5%); on enwik8's 100,000,000 bytes that is exactly its
// standard split (90M / 5M / 5M, Mahoney's Hutter-prize file as the literature uses it). With a tokenizer each split's
// bytes are encoded on their own, so the held-out text is the same bytes whatever the tokenizer, and bits per byte
// (total nats / ln 2 / the bytes the predicted tokens stand for: target_bytes()) compare across tokenizers.
// Windows, streams and sizes below count units: bytes, or tokens with a tokenizer.
//
// Training batches are seeded random windows; evaluation walks consecutive windows so that bits per
// character cover the whole split (less the final partial window). For a model with a memory of earlier
// segments (Transformer-XL, models/xl_memory.h), streams cut the split into `batch` contiguous parts read
// segment after segment, so that each row of a batch continues the same row of the batch before.
#pragma once
#include <string>
#include <vector>

#include "datasets/lm_batch.h"
#include "datasets/tokenizer.h"
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
  // `tokenizer` (may be null: bytes) is used only here, to encode the splits.
  explicit TextCorpus(const std::string& path, Tokenizer* tokenizer = nullptr);
  static constexpr int64_t kVocab = 256;
  int64_t vocab() const { return vocab_; }
  bool tokenized() const { return !ids_.empty(); }
  int64_t split_bytes(TextSplit s) const;
  // The bytes that the targets of `b` stand for (one per target without a tokenizer).
  int64_t target_bytes(const LMBatch& b) const;

  const std::string& path() const { return path_; }
  // Throws, naming the file and the split, unless every split holds a window of `len` + 1 bytes: checked before
  // training, so that a run never trains and then finds its validation or test split too short.
  void check_windows(int64_t len) const;
  int64_t size(TextSplit s) const { return end(s) - begin(s); }

  // `batch` windows of `len` + 1 bytes at uniform random starts in the split: inputs are the first len
  // bytes, targets the last len (next-byte prediction), both [batch, len] i64. They are rows
  // [first_row, first_row + batch) of a batch drawn from `stream`: row g's start is drawn from stream.fork(g).
  LMBatch sample(TextSplit s, const Rng& stream, int64_t first_row, int64_t batch, int64_t len) const;

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
  int64_t unit(int64_t i) const { return ids_.empty() ? int64_t(bytes_[size_t(i)]) : int64_t(ids_[size_t(i)]); }
  const char* units() const { return ids_.empty() ? "bytes" : "tokens"; }

  std::string path_;
  std::vector<uint8_t> bytes_;  // without a tokenizer
  std::vector<int32_t> ids_;    // with one: the three splits' tokens, in order
  std::vector<int32_t> token_bytes_;  // with one: the bytes each token stands for
  int64_t vocab_ = kVocab;
  TextSplitSizes sizes_;        // in units
  TextSplitSizes byte_sizes_;
};

}  // namespace eng
