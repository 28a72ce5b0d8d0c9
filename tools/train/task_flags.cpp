#include "tools/train/task_flags.h"

#include "datasets/mnist.h"
#include "engine/error.h"

namespace eng::jobs {

int64_t& add_seq_len_flag(Cli& cli, const std::string& help) {
  return cli.add_int("seq-len", 128, {1, 1 << 24}, help);
}

SymbolFlags::SymbolFlags(Cli& cli, const std::string& seq_len_help)
    : seq_len(add_seq_len_flag(cli, seq_len_help)),
      symbols(cli.add_int("symbols", 10, {1, 1 << 20}, "distinct symbols")),
      fixed(cli.add_bool("fixed-length", false, "always use the longest sequence")) {}

std::map<std::string, std::string> SymbolFlags::keys() const {
  return {{"symbols", std::to_string(symbols)}, {"fixed_length", fixed ? "true" : "false"}};
}

CorpusFlag::CorpusFlag(Cli& cli)
    : data(cli.add_string("data", "", "the corpus file (any bytes; split 90/5/5 in order)")) {}

const std::string& CorpusFlag::corpus_path(const std::string& task) const {
  ENG_CHECK(!data.empty(), "train: task ", task, " needs --data FILE (any text file; docs/datasets.md says where to "
            "get enwik8)");
  return data;
}

ImageFlags::ImageFlags(Cli& cli, const std::string& test_images_help)
    : data(cli.add_string("data", "", "an MNIST directory (default: the installed Fashion-MNIST)")),
      test_images(cli.add_int("test-images", 10000, {1, 10000000}, test_images_help)) {}

ImageSplits ImageFlags::load() const { return load_mnist(locate_mnist(data)); }

}  // namespace eng::jobs
