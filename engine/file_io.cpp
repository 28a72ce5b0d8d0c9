#include "engine/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "engine/error.h"

namespace eng {

namespace {

const char* kind_of_mode(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Each temporary file of this process gets the next number: with the pid, a name no live writer shares.
std::atomic<uint64_t> g_temp_counter{0};

}  // namespace

InputFile::InputFile(const std::string& path, const std::string& who) : path_(path), who_(who) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) fail(who, ": ", path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    fail(who, ": ", path, ": cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail(who, ": ", path, ": is ", kind_of_mode(st.st_mode), ", not a regular file");
  }
  size_ = int64_t(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_at(int64_t offset, void* out, size_t n, const std::string& what) const {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t k = ::pread(fd_, p, n, off_t(offset));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail(who_, ": ", path_, ": cannot read ", what, ": ", std::strerror(errno));
    if (k == 0) fail(who_, ": ", path_, ": cannot read ", what, ": the file ended early (changed while read?)");
    p += k;
    offset += k;
    n -= size_t(k);
  }
}

std::vector<uint8_t> read_file_bytes(const std::string& path, const std::string& who) {
  InputFile in(path, who);
  std::vector<uint8_t> bytes;
#if defined(__cpp_exceptions)
  try {
    bytes.resize(size_t(in.size()));
  } catch (const std::bad_alloc&) {
    fail(who, ": ", path, ": its ", in.size(), " bytes do not fit in memory");
  }
#else
  bytes.resize(size_t(in.size()));  // without exceptions, running out of memory aborts
#endif
  if (!bytes.empty()) in.read_at(0, bytes.data(), bytes.size(), "its " + std::to_string(bytes.size()) + " bytes");
  return bytes;
}

std::string file_kind(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return "";
  return kind_of_mode(st.st_mode);
}

void check_output_path(const std::string& path, const std::string& who) {
  const std::string kind = file_kind(path);
  ENG_CHECK(kind.empty() || kind == "a regular file", who, ": ", path, " is ", kind,
            ", not a regular file: refusing to write over it (remove it first, or give the path of a regular file or "
            "of a new one)");
}

// The path with its directory resolved (symbolic links, "." and ".."), so that a file not written yet still
// compares by where it would be: realpath(3) of the directory, not std::filesystem (which brings iostreams and
// locales into every program that links this file: docs/embedding.md).
static std::string resolved_path(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
  char buf[PATH_MAX];
  if (!::realpath(dir.c_str(), buf)) return p;
  return std::string(buf) + "/" + (slash == std::string::npos ? p : p.substr(slash + 1));
}

bool same_file(const std::string& a, const std::string& b) {
  if (a == b) return true;
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  return resolved_path(a) == resolved_path(b);
}

AtomicFile::AtomicFile(const std::string& path, const std::string& who) : path_(path), who_(who) {
  check_output_path(path, who);
  remove_stale_temp_files(path);
  for (;;) {
    tmp_ = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_temp_counter++);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ >= 0) break;
    if (errno != EEXIST) fail_errno("cannot create");  // EEXIST: left by a dead process of our pid; next number
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::fail_errno(const char* what) const {
  const int e = errno;
  fail(who_, ": ", path_, ": ", what, " ", tmp_, ": ", std::strerror(e));
}

bool write_fully(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = EIO;
      return false;
    }
    p += k;
    n -= size_t(k);
  }
  return true;
}

void AtomicFile::write(const void* data, size_t n) {
  if (!write_fully(fd_, data, n)) fail_errno("cannot write");
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail_errno("cannot fsync");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail_errno("cannot close");
  check_output_path(path_, who_);  // what stands at the target may have changed while we wrote
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail_errno("cannot rename to the target,");
  committed_ = true;
  // Persists the rename itself. Best effort: some file systems refuse fsync on a directory, and the new file is
  // complete either way.
  const int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes, const std::string& who) {
  AtomicFile file(path, who);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

int remove_stale_temp_files(const std::string& path) {
  const std::string prefix = base_name(path) + ".tmp.", dir = directory_of(path);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    // PREFIX<pid>.<number>, digits only: nothing else is ours to remove.
    const std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || dot + 1 == rest.size() || dot > 9 ||
        rest.find_first_not_of("0123456789.") != std::string::npos || rest.find('.', dot + 1) != std::string::npos)
      continue;
    const pid_t pid = pid_t(std::stol(rest.substr(0, dot)));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    const std::string full = dir + "/" + name;
    if (file_kind(full) == "a regular file" && ::unlink(full.c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace eng
