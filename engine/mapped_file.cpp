#include "engine/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "engine/error.h"
#include "engine/file_io.h"

namespace eng {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, const std::string& who) {
  const InputFile in(path, who);  // the descriptor may close once mapped: the mapping keeps the file
  std::shared_ptr<MappedFile> m(new MappedFile);
  if (in.size() == 0) return m;
  ENG_CHECK(uint64_t(in.size()) <= SIZE_MAX, who, ": ", path, ": ", in.size(),
            " bytes do not fit in the address space");
  void* p = ::mmap(nullptr, size_t(in.size()), PROT_READ, MAP_PRIVATE, in.fd(), 0);
  if (p == MAP_FAILED) fail(who, ": ", path, ": cannot map: ", std::strerror(errno));
  m->data_ = static_cast<const uint8_t*>(p);
  m->size_ = size_t(in.size());
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace eng
