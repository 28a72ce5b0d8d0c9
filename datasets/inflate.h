// Decompression of the formats datasets arrive in, without zlib: DEFLATE (RFC 1951: stored, fixed and
// dynamic Huffman blocks) inside a gzip file (RFC 1952, as Debian ships Fashion-MNIST) or a zlib stream
// (RFC 1950, as PNG stores its pixels). Every error names `what` (the file) and the problem; checksums
// and stored lengths are verified, and output beyond `max_output` bytes is refused (a corrupt or
// hostile file cannot exhaust memory).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace eng {

// 4 GiB by default, or what a 32-bit address space can hold.
constexpr size_t kMaxInflateOutput = size_t(std::min<uint64_t>(uint64_t(1) << 32, SIZE_MAX));

// Raw DEFLATE data; `consumed` (optional) receives the bytes read up to the end of the final block.
std::vector<uint8_t> inflate_raw(const uint8_t* data, size_t n, const std::string& what, size_t* consumed = nullptr,
                                 size_t max_output = kMaxInflateOutput);

// True when `bytes` starts with the gzip magic 1f 8b.
bool is_gzip(const std::vector<uint8_t>& bytes);

// A whole gzip file: one or more members, each with its CRC-32 and length checked.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& file, const std::string& what,
                            size_t max_output = kMaxInflateOutput);

// A zlib stream: header, DEFLATE data, Adler-32 trailer; nothing may follow.
std::vector<uint8_t> zlib_decompress(const std::vector<uint8_t>& stream, const std::string& what,
                                     size_t max_output = kMaxInflateOutput);

}  // namespace eng
