// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors):
//   u64 little-endian N | N bytes of JSON header, space-padded to a multiple of 8 | raw data
// The header maps each tensor name to {"dtype": "F32"|"F64"|"I64"|"U8"|"F16"|"BF16", "shape": [...],
// "data_offsets": [begin, end]} (byte offsets relative to the start of the data section) and may
// hold "__metadata__": {string: string}. Tensor data is little-endian, row-major, and tiles the data
// section exactly: no gaps, no overlaps. Errors throw eng::Error "safetensors: <path>: <what>".
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace eng {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in the order of their data in the file
  std::map<std::string, std::string> metadata;
};

// Writes the tensors in the given order (non-contiguous views are written in logical row-major
// order). Names must be unique, non-empty and not "__metadata__". Atomic (engine/file_io.h's AtomicFile): the
// file is written to a temporary file of this writer's own beside `path`, fsync'ed and renamed over `path`, so an
// existing file is either kept whole or replaced whole; on failure the temporary file is removed. A `path` that
// is not a regular file (a directory, a device, a symbolic link) is refused.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates a whole file into fresh contiguous CPU tensors (no gradient tracking); F16 and BF16 tensors
// are widened to F32 (exactly). Only a regular file is read: a FIFO, a device or a directory is refused without blocking on it.
SafetensorsFile load_safetensors(const std::string& path);

// The safetensors spelling of a dtype: "F32", "F64", "I64", "U8".
const char* safetensors_dtype_name(DType t);

}  // namespace eng
