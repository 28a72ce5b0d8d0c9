#include "datasets/text.h"

#include "engine/file_io.h"
#include "engine/error.h"

namespace eng {

const char* text_split_name(TextSplit s) {
  return s == TextSplit::Train ? "train" : s == TextSplit::Valid ? "valid" : "test";
}

TextSplitSizes text_split_sizes(int64_t n) { return {n - 2 * (n / 20), n / 20, n / 20}; }

TextCorpus::TextCorpus(const std::string& path, Tokenizer* tokenizer)
    : path_(path), bytes_(read_file_bytes(path, "text")) {
  const int64_t n = int64_t(bytes_.size());
  // Window starts are drawn with Rng::below, which takes 32-bit bounds.
  ENG_CHECK(n >= 40 && n < (int64_t(1) << 32), "text: ", path, ": ", n,
            " bytes; a corpus needs 40 bytes (so that each split holds two) to 4 GiB");
  sizes_ = byte_sizes_ = text_split_sizes(n);
  if (!tokenizer) return;
  vocab_ = tokenizer->vocab_size();
  for (int32_t id = 0; id < vocab_; ++id)
    token_bytes_.push_back(tokenizer->type(id) == TokenType::Special ? 0 : int32_t(tokenizer->bytes(id).size()));
  const std::string_view text(reinterpret_cast<const char*>(bytes_.data()), bytes_.size());
  int64_t* sizes[] = {&sizes_.train, &sizes_.valid, &sizes_.test};
  int64_t at = 0, i = 0;
  for (int64_t part : {byte_sizes_.train, byte_sizes_.valid, byte_sizes_.test}) {
    const size_t before = ids_.size();
    tokenizer->encode(text.substr(size_t(at), size_t(part)), ids_);
    *sizes[i++] = int64_t(ids_.size() - before);
    at += part;
  }
  ENG_CHECK(uint64_t(ids_.size()) < (uint64_t(1) << 32), "text: ", path, ": ", ids_.size(), " tokens, more than 4 Gi");
  bytes_ = {};
}

int64_t TextCorpus::split_bytes(TextSplit s) const {
  return s == TextSplit::Train ? byte_sizes_.train : s == TextSplit::Valid ? byte_sizes_.valid : byte_sizes_.test;
}

int64_t TextCorpus::target_bytes(const LMBatch& b) const {
  if (ids_.empty()) return b.targets.numel();
  const Tensor t = b.targets.contiguous();
  int64_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += token_bytes_[size_t(t.data<int64_t>()[i])];
  return n;
}

int64_t TextCorpus::begin(TextSplit s) const {
  return s == TextSplit::Train ? 0 : s == TextSplit::Valid ? sizes_.train : sizes_.train + sizes_.valid;
}

int64_t TextCorpus::end(TextSplit s) const {
  return s == TextSplit::Train ? sizes_.train
         : s == TextSplit::Valid ? sizes_.train + sizes_.valid
                                 : sizes_.train + sizes_.valid + sizes_.test;
}

void TextCorpus::check_len(TextSplit s, int64_t len) const {
  ENG_CHECK(len >= 1 && len + 1 <= size(s), "text: ", path_, ": the ", text_split_name(s), " split holds ", size(s),
            " ", units(), ", too few for a window of ", len, " + 1");
}

void TextCorpus::check_windows(int64_t len) const {
  for (TextSplit s : {TextSplit::Train, TextSplit::Valid, TextSplit::Test}) check_len(s, len);
}

LMBatch TextCorpus::sample(TextSplit s, const Rng& stream, int64_t first_row, int64_t batch, int64_t len) const {
  check_len(s, len);
  LMBatch b{empty({batch, len}, DType::I64), empty({batch, len}, DType::I64)};
  int64_t* in = b.inputs.data<int64_t>();
  int64_t* tg = b.targets.data<int64_t>();
  const uint64_t starts = uint64_t(size(s) - len);  // a window needs len + 1 bytes
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t w = begin(s) + int64_t(stream.fork(uint64_t(first_row + i)).below(starts));
    for (int64_t t = 0; t < len; ++t) {
      in[i * len + t] = unit(w + t);
      tg[i * len + t] = unit(w + t + 1);
    }
  }
  return b;
}

int64_t TextCorpus::num_windows(TextSplit s, int64_t len) const {
  check_len(s, len);
  return (size(s) - 1) / len;
}

LMBatch TextCorpus::windows(TextSplit s, int64_t first, int64_t count, int64_t len) const {
  const int64_t total = num_windows(s, len);
  ENG_CHECK(first >= 0 && count >= 0 && first + count <= total, "text: ", path_, ": windows [", first, ", ",
            first + count, ") of ", len, " ", units(), " are outside the ", total, " of the ", text_split_name(s), " split");
  LMBatch b{empty({count, len}, DType::I64), empty({count, len}, DType::I64)};
  int64_t* in = b.inputs.data<int64_t>();
  int64_t* tg = b.targets.data<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t w = begin(s) + (first + i) * len;
    for (int64_t t = 0; t < len; ++t) {
      in[i * len + t] = unit(w + t);
      tg[i * len + t] = unit(w + t + 1);
    }
  }
  return b;
}

int64_t TextCorpus::num_stream_segments(TextSplit s, int64_t streams, int64_t len) const {
  ENG_CHECK(streams >= 1 && len >= 1, "text: ", path_, ": streams and segment length must be >= 1, got ", streams,
            " and ", len);
  const int64_t stream = size(s) / streams;
  ENG_CHECK(stream >= len + 1, "text: ", path_, ": the ", text_split_name(s), " split holds ", size(s), " ", units(), ", ",
            stream, " per stream of ", streams, ", too few for a segment of ", len, " + 1");
  return (stream - 1) / len;
}

LMBatch TextCorpus::stream_segment(TextSplit s, int64_t streams, int64_t len, int64_t t) const {
  const int64_t total = num_stream_segments(s, streams, len);
  ENG_CHECK(t >= 0 && t < total, "text: ", path_, ": segment ", t, " is outside the ", total, " segments of ", len,
            " ", units(), " in ", streams, " streams of the ", text_split_name(s), " split");
  const int64_t stream = size(s) / streams;
  LMBatch b{empty({streams, len}, DType::I64), empty({streams, len}, DType::I64)};
  int64_t* in = b.inputs.data<int64_t>();
  int64_t* tg = b.targets.data<int64_t>();
  for (int64_t i = 0; i < streams; ++i) {
    const int64_t w = begin(s) + i * stream + t * len;
    for (int64_t k = 0; k < len; ++k) {
      in[i * len + k] = unit(w + k);
      tg[i * len + k] = unit(w + k + 1);
    }
  }
  return b;
}

}  // namespace eng
