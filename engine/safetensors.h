// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors):
//   u64 little-endian N | N bytes of JSON header, space-padded to a multiple of 8 | raw data
// The header maps each tensor name to {"dtype": "F32"|"F64"|"I64"|"U8"|"F16"|"BF16", "shape": [...],
// "data_offsets": [begin, end]} (byte offsets relative to the start of the data section) and may
// hold "__metadata__": {string: string}. Tensor data is little-endian, row-major, and tiles the data
// section exactly: no gaps, no overlaps. Errors throw eng::Error "safetensors: <path>: <what>".
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace eng {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in the order of their data in the file
  std::map<std::string, std::string> metadata;
  // map_safetensors / view_safetensors: tensors copied instead of viewed, their data offset not being a multiple
  // of their element size (none in a file save_safetensors writes with f32 tensors only).
  int64_t copied = 0;
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

// The same checks, without reading the data: the file is mapped read-only (engine/mapped_file.h) and each tensor
// is a read-only view of its bytes in the mapping (engine/tensor.h's Storage), which the views keep mapped after
// this returns. Only pages that are touched become resident. A tensor whose data is not aligned to its element
// size is copied, and so is an F16 / BF16 one, widened (SafetensorsFile::copied counts them). For inference: a view refuses writes and gradients.
SafetensorsFile map_safetensors(const std::string& path);
// The same over a file already in memory: `size` bytes at `data` (a device without a filesystem, weights linked
// into the binary). `name` stands for the path in errors. The views hold `keeper`; a null keeper is the caller's
// promise that the buffer outlives every tensor returned.
SafetensorsFile view_safetensors(const void* data, size_t size, const std::string& name,
                                 std::shared_ptr<const void> keeper = nullptr);

// The safetensors spelling of a dtype: "F32", "F64", "I64", "U8".
const char* safetensors_dtype_name(DType t);

}  // namespace eng
