// The two checksums of the compressed formats the datasets and pictures use: CRC-32 (the ISO-HDLC
// polynomial of gzip and PNG chunks) and Adler-32 (the zlib stream trailer inside PNG). Both run:
// pass the previous result to continue over a further piece.
#pragma once
#include <cstddef>
#include <cstdint>

namespace eng {

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);
uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler = 1);

}  // namespace eng
