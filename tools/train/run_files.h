// The files a training run reads and writes, checked before anything is loaded or trained. An output (--log,
// --checkpoint, --samples) must be a regular file or not exist yet (never a device, a FIFO, a directory or a
// symbolic link), must not be one of the run's inputs (--data, --resume) or another of its outputs, and is
// claimed for the run with a FileLock (engine/file_lock.h), which also proves early that its directory is
// writable. The one overlap allowed is a run continuing its own checkpoint (--checkpoint X --resume X).
// Temporary files left by writers of an output that were killed mid-write are removed.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/file_lock.h"

namespace eng::jobs {

struct FlagPath {
  std::string flag, path;  // "log", "run.csv"; an empty path is a flag not given
};

class RunFiles {
 public:
  RunFiles(const std::vector<FlagPath>& outputs, const std::vector<FlagPath>& inputs);

 private:
  std::vector<std::unique_ptr<FileLock>> locks_;
};

}  // namespace eng::jobs
