// An exclusive claim on an output file for the life of a process, so that two runs writing the same checkpoint
// or log cannot interleave: the lock is `path + ".lock"`, held with flock(2), which the kernel releases when the
// holder exits in any way (a SIGKILL leaves no stale lock, only the file, which the next holder reuses). The
// lock file holds the holder's pid, which a refused run names:
//   "train: checkpoint x.st is in use by another running process (pid 4242; lock file x.st.lock)"
#pragma once
#include <string>

namespace eng {

class FileLock {
 public:
  // Takes the lock or throws eng::Error; `what` names the file in the message ("train: checkpoint").
  FileLock(const std::string& path, const std::string& what);
  ~FileLock();  // removes the lock file and releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::string lock_path_;
  int fd_ = -1;
};

}  // namespace eng
