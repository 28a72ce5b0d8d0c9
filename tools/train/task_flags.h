// Flags that several tasks declare alike, each task on its own Cli (task.h), so that one definition keeps their
// names, defaults and ranges the same wherever they appear.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "datasets/image_dataset.h"
#include "engine/cli.h"

namespace eng::jobs {

// --seq-len: the longest sequence (or the window) of the task, in tokens.
int64_t& add_seq_len_flag(Cli& cli, const std::string& help);

// The sequences of symbols of copy, reverse and sort: --seq-len, --symbols, --fixed-length; the last two are the
// task's checkpoint keys (symbols, fixed_length).
struct SymbolFlags {
  SymbolFlags(Cli& cli, const std::string& seq_len_help);
  std::map<std::string, std::string> keys() const;
  int64_t& seq_len;
  int64_t& symbols;
  bool& fixed;
};

// --data of a task that reads a text file (datasets/text.h); corpus_path() refuses a run without one.
struct CorpusFlag {
  explicit CorpusFlag(Cli& cli);
  const std::string& corpus_path(const std::string& task) const;
  std::string& data;
};

// --data and --test-images of a task on MNIST-format images (datasets/mnist.h).
struct ImageFlags {
  ImageFlags(Cli& cli, const std::string& test_images_help);
  ImageSplits load() const;  // from --data, else the installed Fashion-MNIST
  std::string& data;
  int64_t& test_images;
};

}  // namespace eng::jobs
