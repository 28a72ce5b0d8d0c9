#include "tools/train/run_files.h"

#include "engine/error.h"
#include "engine/file_io.h"

namespace eng::jobs {

RunFiles::RunFiles(const std::vector<FlagPath>& outputs, const std::vector<FlagPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const FlagPath& out = outputs[i];
    if (out.path.empty()) continue;
    check_output_path(out.path, "train: --" + out.flag);
    for (const FlagPath& in : inputs)
      ENG_CHECK(in.path.empty() || !same_file(out.path, in.path) || (out.flag == "checkpoint" && in.flag == "resume"),
                "train: --", out.flag, " ", out.path, " is the input --", in.flag,
                " of this run: refusing to write over it (give --", out.flag, " another path)");
    for (size_t j = 0; j < i; ++j)
      ENG_CHECK(outputs[j].path.empty() || !same_file(out.path, outputs[j].path), "train: --", out.flag, " and --",
                outputs[j].flag, " are the same file ", out.path, ": give each its own path");
  }
  for (const FlagPath& out : outputs) {
    if (out.path.empty()) continue;
    locks_.push_back(std::make_unique<FileLock>(out.path, "train: --" + out.flag));
    remove_stale_temp_files(out.path);
  }
}

}  // namespace eng::jobs
