#include "datasets/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/error.h"

namespace eng {

std::vector<uint8_t> read_file_bytes(const std::string& path, const char* who) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(who, ": ", path, ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(who, ": ", path, ": cannot open: ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (!in || size < 0) fail(who, ": ", path, ": cannot read (not a regular file?)");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (size > 0) in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(size));
  if (!in) fail(who, ": ", path, ": cannot read its ", size, " bytes");
  return bytes;
}

void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes, const char* who) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(who, ": ", path, ": cannot create ", tmp, ": ", std::strerror(errno));
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      fail(who, ": ", path, ": cannot write ", tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    fail(who, ": ", path, ": cannot rename ", tmp, " to the target: ", std::strerror(e));
  }
}

}  // namespace eng
