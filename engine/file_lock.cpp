#include "engine/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/error.h"
#include "engine/file_io.h"

namespace eng {

FileLock::FileLock(const std::string& path, const std::string& what) : lock_path_(path + ".lock") {
  check_output_path(lock_path_, what);
  // The holder unlinks the lock file before it releases the lock, so a lock taken on a file that is no longer at
  // lock_path_ is worthless: retry on the file that stands there now.
  for (int attempt = 0;; ++attempt) {
    fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ < 0) fail(what, " ", path, ": cannot create the lock file ", lock_path_, ": ", std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      char pid[32] = {0};
      const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
      ::close(fd_);
      fd_ = -1;
      std::string holder = n > 0 ? std::string(pid, size_t(n)) : "";
      if (holder.find_first_not_of("0123456789") != std::string::npos || holder.empty()) holder = "unknown";
      ENG_CHECK(e != EWOULDBLOCK, what, " ", path, " is in use by another running process (pid ", holder,
                "; lock file ", lock_path_, "): wait for it to finish, or choose another path");
      fail(what, " ", path, ": cannot lock ", lock_path_, ": ", std::strerror(e));
    }
    struct stat held, now;
    if (::fstat(fd_, &held) == 0 && ::stat(lock_path_.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino)
      break;
    ::close(fd_);
    fd_ = -1;
    ENG_CHECK(attempt < 100, what, " ", path, ": the lock file ", lock_path_, " keeps changing");
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    const int e = errno;
    ::unlink(lock_path_.c_str());
    ::close(fd_);
    fail(what, " ", path, ": cannot write the lock file ", lock_path_, ": ", std::strerror(e));
  }
}

FileLock::~FileLock() {
  ::unlink(lock_path_.c_str());
  ::close(fd_);
}

}  // namespace eng
