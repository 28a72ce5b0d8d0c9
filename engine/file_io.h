// Files as the programs read and write them. Reading takes regular files only: a directory, a FIFO, a device
// or a socket is refused by name, without blocking on it. Writing replaces a file atomically through a
// temporary file of its own (PATH.tmp.<pid>.<random>, so that two writers never share one), and never
// replaces what is not a regular file. Errors start with `who` (e.g. "idx") and name the file:
//   "idx: /data/x: cannot open: No such file or directory", "text: /dev/zero: is a character device, not a
//   regular file".
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace eng {

// A regular file opened for reading.
class InputFile {
 public:
  InputFile(const std::string& path, const std::string& who);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  int64_t size() const { return size_; }
  int fd() const { return fd_; }  // for mapping it (engine/mapped_file.h)
  // Reads exactly n bytes at `offset`; `what` names them in the error ("the header").
  void read_at(int64_t offset, void* out, size_t n, const std::string& what) const;

 private:
  std::string path_, who_;
  int fd_ = -1;
  int64_t size_ = 0;
};

std::vector<uint8_t> read_file_bytes(const std::string& path, const std::string& who);

// "a directory", "a FIFO", "a symbolic link", ... for what stands at `path` (lstat, links not followed);
// "" when nothing does, "a regular file" for one.
std::string file_kind(const std::string& path);

// Refuses an output path at which something other than a regular file stands (a directory, a device, a FIFO,
// a symbolic link, a socket): writing there would replace or feed it rather than write a file.
void check_output_path(const std::string& path, const std::string& who);

// Whether two paths name the same file, existing or not: the same text, the same canonical path (links resolved
// as far as they exist), or the same device and inode (hard links).
bool same_file(const std::string& a, const std::string& b);

// Atomic replacement of `path`: write() goes to a new temporary file beside it, commit() makes it durable and
// renames it over `path`; without commit() (an error, an exception) the temporary file is removed. An existing
// `path` is either kept whole or replaced whole.
class AtomicFile {
 public:
  AtomicFile(const std::string& path, const std::string& who);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t n);
  void commit();

 private:
  [[noreturn]] void fail_errno(const char* what) const;
  std::string path_, who_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes all n bytes to `fd`, retrying short writes and EINTR. False on an error, with errno saying which (EIO
// for a write that moved nothing).
bool write_fully(int fd, const void* data, size_t n);

void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes, const std::string& who);

// Removes the temporary files of AtomicFile writers of `path` that were killed mid-write: those whose process
// no longer exists. A live writer's file is never touched. Returns how many were removed.
int remove_stale_temp_files(const std::string& path);

}  // namespace eng
