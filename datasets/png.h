// A small PNG writer (8-bit grayscale or RGB, or palette indices, no library): pixel rows behind a filter byte of 0, in a zlib
// stream of stored (uncompressed) DEFLATE blocks, with the chunk CRC-32s and the stream's Adler-32. The
// files are larger than compressed ones but every viewer reads them. Writes are atomic (temporary file,
// then rename). image_grid tiles a batch of images into one picture, for sample sheets.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace eng {

struct Picture {
  int64_t width = 0, height = 0, channels = 1;  // channels: 1 (grayscale) or 3 (RGB)
  std::vector<uint8_t> pixels;                  // [height, width, channels], row-major
  // With a palette (RGB triples, at most 256 colours), channels is 1 and pixels are palette indices, packed at
  // 1, 2, 4 or 8 bits (the fewest the palette needs): stored blocks do not compress, so this keeps files small.
  std::vector<uint8_t> palette;
};

std::vector<uint8_t> encode_png(const Picture& picture);
void write_png(const std::string& path, const Picture& picture);

// Images [N, C, H, W] (C = 1 or 3; values 0..255, rounded and clamped; any dtype) laid out `cols` to a
// row, `pad` pixels of `pad_value` around each.
Picture image_grid(const Tensor& images, int64_t cols, int64_t pad = 2, uint8_t pad_value = 128);

}  // namespace eng
