// A regular file mapped read-only into memory (POSIX mmap, PROT_READ, MAP_PRIVATE). Nothing is read when it is
// mapped: each page comes from the page cache the first time it is touched, so resident memory grows only with
// what is read, processes mapping one file share its pages, and a second run finds them cached. A write through
// the mapping faults; tensors viewing it are read-only (engine/tensor.h's Storage). The mapping lives as long as
// the last shared_ptr to it: a tensor view holds one, so the file stays mapped after its loader returns.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace eng {

class MappedFile {
 public:
  // Only a regular file is mapped (engine/file_io.h's InputFile refuses the rest); errors start with `who` and
  // name the file. An empty file maps to size() 0 and a null data().
  static std::shared_ptr<const MappedFile> open(const std::string& path, const std::string& who);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace eng
