#include "datasets/png.h"

#include <algorithm>
#include <cmath>

#include "engine/checksum.h"
#include "engine/file_io.h"
#include "engine/error.h"

namespace eng {

namespace {

void put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

void chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put32(out, uint32_t(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put32(out, crc32(out.data() + start, out.size() - start));  // over the type and the data
}

// A zlib stream (RFC 1950) of stored DEFLATE blocks (RFC 1951 §3.2.4), at most 65535 bytes each.
std::vector<uint8_t> zlib_stored(const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> z = {0x78, 0x01};  // DEFLATE, 32 KiB window, no dictionary; 0x7801 % 31 == 0
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(raw.size() - pos, 65535);
    const bool last = pos + n == raw.size();
    z.push_back(last ? 1 : 0);  // BFINAL, then BTYPE 00 (stored); the rest of the byte is padding
    z.push_back(uint8_t(n));
    z.push_back(uint8_t(n >> 8));
    z.push_back(uint8_t(~n));
    z.push_back(uint8_t(~n >> 8));
    z.insert(z.end(), raw.begin() + std::ptrdiff_t(pos), raw.begin() + std::ptrdiff_t(pos + n));
    pos += n;
  } while (pos < raw.size());
  put32(z, adler32(raw.data(), raw.size()));
  return z;
}

}  // namespace

std::vector<uint8_t> encode_png(const Picture& p) {
  ENG_CHECK(p.channels == 1 || p.channels == 3, "png: channels must be 1 (grayscale) or 3 (RGB), got ", p.channels);
  // One IDAT chunk holds under 2^31 bytes; far larger than any sample sheet.
  ENG_CHECK(p.width >= 1 && p.height >= 1 && p.width * p.channels < (int64_t(1) << 20) &&
                p.height < (int64_t(1) << 20) && (p.width * p.channels + 1) * p.height < (int64_t(1) << 30),
            "png: picture ", p.width, "x", p.height, "x", p.channels, " is empty or too large");
  ENG_CHECK(int64_t(p.pixels.size()) == p.width * p.height * p.channels, "png: ", p.pixels.size(),
            " pixel bytes for a ", p.width, "x", p.height, "x", p.channels, " picture");
  const size_t colours = p.palette.size() / 3;
  ENG_CHECK(p.palette.size() % 3 == 0 && colours <= 256 && (colours == 0 || p.channels == 1), "png: a palette holds "
            "1 to 256 RGB triples for a one-channel picture of indices, got ", p.palette.size(), " bytes and ",
            p.channels, " channels");
  int bits = 8;
  if (colours > 0)
    for (bits = 1; (size_t(1) << bits) < colours;) bits *= 2;
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put32(ihdr, uint32_t(p.width));
  put32(ihdr, uint32_t(p.height));
  // bit depth, colour type 0 (gray), 2 (RGB) or 3 (palette), compression 0, filter method 0, no interlace
  ihdr.insert(ihdr.end(), {uint8_t(bits), uint8_t(colours > 0 ? 3 : p.channels == 1 ? 0 : 2), 0, 0, 0});
  chunk(out, "IHDR", ihdr);
  if (colours > 0) chunk(out, "PLTE", p.palette);
  const size_t row = size_t(p.width * p.channels);
  std::vector<uint8_t> raw;
  raw.reserve((row + 1) * size_t(p.height));
  for (int64_t y = 0; y < p.height; ++y) {
    raw.push_back(0);  // filter type 0: the row as it is
    if (colours == 0) {
      raw.insert(raw.end(), p.pixels.begin() + std::ptrdiff_t(size_t(y) * row),
                 p.pixels.begin() + std::ptrdiff_t(size_t(y + 1) * row));
      continue;
    }
    for (int64_t x = 0; x < p.width; ++x) {  // indices packed from the high bits of each byte
      const uint8_t v = p.pixels[size_t(y * p.width + x)];
      ENG_CHECK(v < colours, "png: pixel index ", int(v), " outside the palette of ", colours, " colours");
      const int64_t bit = x * bits % 8;
      if (bit == 0) raw.push_back(0);
      raw.back() |= uint8_t(v << (8 - bits - bit));
    }
  }
  chunk(out, "IDAT", zlib_stored(raw));
  chunk(out, "IEND", {});
  return out;
}

void write_png(const std::string& path, const Picture& picture) { write_file_atomic(path, encode_png(picture), "png"); }

Picture image_grid(const Tensor& images, int64_t cols, int64_t pad, uint8_t pad_value) {
  ENG_CHECK(images.defined() && images.dim() == 4 && (images.size(1) == 1 || images.size(1) == 3) &&
                images.size(0) >= 1,
            "image_grid: images must be [N, C, H, W] with N >= 1 and C = 1 or 3, got ",
            images.defined() ? shape_str(images.shape()) : "undefined");
  ENG_CHECK(cols >= 1 && pad >= 0, "image_grid: cols must be >= 1 and pad >= 0, got ", cols, " and ", pad);
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  cols = std::min(cols, N);
  const int64_t rows = (N + cols - 1) / cols;
  Picture p;
  p.channels = C;
  p.width = cols * (W + pad) + pad;
  p.height = rows * (H + pad) + pad;
  p.pixels.assign(size_t(p.width * p.height * C), pad_value);
  const std::vector<double> v = images.detach().to_vector();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t x0 = pad + (n % cols) * (W + pad), y0 = pad + (n / cols) * (H + pad);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x) {
          const double value = v[size_t(((n * C + c) * H + y) * W + x)];
          const double level = std::isnan(value) ? 0.0 : std::clamp(std::round(value), 0.0, 255.0);
          p.pixels[size_t(((y0 + y) * p.width + x0 + x) * C + c)] = uint8_t(level);
        }
  }
  return p;
}

}  // namespace eng
