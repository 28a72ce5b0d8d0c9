// Whole-file reads and atomic writes for the dataset readers and picture writers. Errors start with
// `who` (the reader, e.g. "idx") and name the file: "idx: /data/x: cannot open: No such file or directory".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace eng {

std::vector<uint8_t> read_file_bytes(const std::string& path, const char* who);

// Writes `bytes` to `path + ".tmp"`, then renames it over `path`: a reader sees the old file or the
// whole new one, never a partial picture. The temporary file is removed when anything fails.
void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes, const char* who);

}  // namespace eng
