#include "datasets/idx.h"

#include "engine/file_io.h"
#include "datasets/inflate.h"
#include "engine/error.h"

namespace eng {

namespace {

const char* type_name(uint8_t t) {
  switch (t) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "i16";
    case 0x0C: return "i32";
    case 0x0D: return "f32";
    case 0x0E: return "f64";
    default: return "unknown";
  }
}

std::string hex32(uint32_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 7; i >= 0; --i) s += digits[(v >> (4 * i)) & 15];
  return s;
}

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

}  // namespace

IdxArray read_idx(const std::string& path, int64_t ndim) {
  auto error = [&](auto&&... parts) { fail("idx: ", path, ": ", parts...); };
  std::vector<uint8_t> bytes = read_file_bytes(path, "idx");
  if (is_gzip(bytes)) bytes = gunzip(bytes, path);
  const uint32_t want_magic = 0x0800u | uint32_t(ndim);
  if (bytes.size() < 4) error("file of ", bytes.size(), " bytes is too short for the 4-byte magic");
  const uint32_t magic = be32(bytes.data());
  if (bytes[0] != 0 || bytes[1] != 0)
    error("bad magic ", hex32(magic), ": not an IDX file (expected ", hex32(want_magic), ")");
  if (bytes[2] != 0x08)
    error("element type ", hex32(bytes[2]), " (", type_name(bytes[2]),
          ") is not supported: only unsigned bytes (0x08)");
  if (bytes[3] != ndim)
    error("magic ", hex32(magic), " declares ", int(bytes[3]), " dimensions, expected ", ndim, " (magic ",
          hex32(want_magic), ")");
  const size_t header = 4 + 4 * size_t(ndim);
  if (bytes.size() < header) error("file of ", bytes.size(), " bytes is truncated inside its ", header, "-byte header");
  IdxArray out;
  int64_t numel = 1;
  for (int64_t d = 0; d < ndim; ++d) {
    const int64_t size = be32(bytes.data() + 4 + 4 * d);
    out.shape.push_back(size);
    // Sizes are at most 2^32 - 1 each; a product past 2^40 bytes is no dataset this reader can hold.
    if (size != 0 && numel > (int64_t(1) << 40) / size) error("sizes ", out.shape, " are too large");
    numel *= size;
  }
  const int64_t have = int64_t(bytes.size() - header);
  if (have < numel) error("truncated: sizes ", out.shape, " need ", numel, " data bytes, the file holds ", have);
  if (have > numel) error(have - numel, " bytes follow the ", numel, " data bytes that sizes ", out.shape, " need");
  out.data.assign(bytes.begin() + std::ptrdiff_t(header), bytes.end());
  return out;
}

}  // namespace eng
