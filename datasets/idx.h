// IDX files, the format of MNIST and Fashion-MNIST: a magic 0x0000TTDD (TT the element type, DD the
// number of dimensions), DD big-endian 32-bit sizes, then the elements in row-major order. Only
// unsigned bytes (TT = 0x08) occur in those datasets and only they are read: images have magic
// 0x00000803 ([n, rows, cols]), labels 0x00000801 ([n]). A file that starts with the gzip magic is
// decompressed first, since the datasets are distributed as .gz files.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/dtype.h"

namespace eng {

struct IdxArray {
  Shape shape;
  std::vector<uint8_t> data;  // row-major, shape_numel(shape) bytes
};

// Reads an unsigned-byte IDX file of `ndim` dimensions. Fails, naming the file, on a wrong magic, a
// wrong element type or dimension count, or data that are shorter or longer than the sizes say.
IdxArray read_idx(const std::string& path, int64_t ndim);

}  // namespace eng
