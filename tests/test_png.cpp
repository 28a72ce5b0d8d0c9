// The PNG writer, read back byte by byte: signature, chunk lengths and CRC-32s, IHDR fields, and the
// IDAT zlib stream inflated back to the filtered pixel rows.
#include "datasets/png.h"

#include <doctest/doctest.h>

#include <filesystem>

#include "engine/checksum.h"
#include "engine/file_io.h"
#include "datasets/inflate.h"
#include "tests/temp_files.h"

using namespace eng;

namespace {

uint32_t be32(const std::vector<uint8_t>& b, size_t p) {
  return uint32_t(b[p]) << 24 | uint32_t(b[p + 1]) << 16 | uint32_t(b[p + 2]) << 8 | b[p + 3];
}

struct Chunk {
  std::string type;
  std::vector<uint8_t> data;
};

// Splits a PNG into its chunks, checking the signature and every CRC on the way.
std::vector<Chunk> read_chunks(const std::vector<uint8_t>& png) {
  const std::vector<uint8_t> signature = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  REQUIRE(png.size() >= 8);
  CHECK(std::vector<uint8_t>(png.begin(), png.begin() + 8) == signature);
  std::vector<Chunk> chunks;
  size_t p = 8;
  while (p < png.size()) {
    REQUIRE(p + 12 <= png.size());
    const uint32_t len = be32(png, p);
    REQUIRE(p + 12 + len <= png.size());
    CHECK(crc32(png.data() + p + 4, 4 + len) == be32(png, p + 8 + len));
    const auto at = [&](size_t k) { return png.begin() + std::ptrdiff_t(k); };
    chunks.push_back({std::string(at(p + 4), at(p + 8)), std::vector<uint8_t>(at(p + 8), at(p + 8 + len))});
    p += 12 + len;
  }
  return chunks;
}

void check_round_trip(const Picture& pic) {
  const std::vector<Chunk> c = read_chunks(encode_png(pic));
  REQUIRE(c.size() == 3);
  CHECK(c[0].type == "IHDR");
  CHECK(c[1].type == "IDAT");
  CHECK(c[2].type == "IEND");
  CHECK(c[2].data.empty());
  REQUIRE(c[0].data.size() == 13);
  CHECK(be32(c[0].data, 0) == uint32_t(pic.width));
  CHECK(be32(c[0].data, 4) == uint32_t(pic.height));
  CHECK(c[0].data[8] == 8);                             // bit depth
  CHECK(c[0].data[9] == (pic.channels == 1 ? 0 : 2));   // colour type: gray or RGB
  CHECK(c[0].data[10] == 0);                            // compression
  CHECK(c[0].data[11] == 0);                            // filter method
  CHECK(c[0].data[12] == 0);                            // no interlace
  // The stream is a zlib stream of stored blocks; inflating it (Adler-32 checked) gives the rows.
  CHECK(((c[1].data[2] >> 1) & 3) == 0);
  const std::vector<uint8_t> raw = zlib_decompress(c[1].data, "IDAT");
  const size_t row = size_t(pic.width * pic.channels);
  REQUIRE(raw.size() == (row + 1) * size_t(pic.height));
  for (int64_t y = 0; y < pic.height; ++y) {
    CHECK(raw[size_t(y) * (row + 1)] == 0);  // filter type 0
    CHECK(std::equal(raw.begin() + std::ptrdiff_t(size_t(y) * (row + 1) + 1),
                     raw.begin() + std::ptrdiff_t(size_t(y + 1) * (row + 1)),
                     pic.pixels.begin() + std::ptrdiff_t(size_t(y) * row)));
  }
}

}  // namespace

TEST_CASE("png: grayscale and RGB pictures read back exactly") {
  Picture gray{3, 2, 1, {0, 10, 20, 30, 40, 255}, {}};
  check_round_trip(gray);
  // 300 x 100 RGB: 90,100 bytes of rows, so the stream holds two stored blocks
  Picture rgb{300, 100, 3, {}, {}};
  for (int64_t i = 0; i < 300 * 100 * 3; ++i) rgb.pixels.push_back(uint8_t(i * 7 % 256));
  check_round_trip(rgb);
}

TEST_CASE("png: writes atomically and names the file on failure") {
  eng::test::TempDir dir;
  const std::string f = dir.file("p.png");
  Picture pic{2, 2, 1, {1, 2, 3, 4}, {}};
  write_png(f, pic);
  CHECK(read_file_bytes(f, "test") == encode_png(pic));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), {}) == 1);  // no temporary file left
  const std::string nowhere = dir.file("no/such/dir/p.png");
  CHECK_THROWS_WITH(write_png(nowhere, pic), doctest::Contains(("png: " + nowhere + ": cannot create").c_str()));
  CHECK_THROWS_WITH(encode_png(Picture{2, 2, 2, {}, {}}), "png: channels must be 1 (grayscale) or 3 (RGB), got 2");
  CHECK_THROWS_WITH(encode_png(Picture{2, 2, 1, {1}, {}}), "png: 1 pixel bytes for a 2x2x1 picture");
}

TEST_CASE("png: image_grid tiles images with padding, rounding and clamping") {
  // three 1x2x2 images, two to a row, pad 1 of value 9
  Tensor images = from_vector(std::vector<double>{0, 1, 2, 3, 10, 11, 12, 13, 300, -5, 20.6, 21.4}, {3, 1, 2, 2});
  Picture g = image_grid(images, 2, 1, 9);
  CHECK(g.width == 7);
  CHECK(g.height == 7);
  const std::vector<uint8_t> want = {9, 9,   9, 9, 9,  9,  9,  //
                                     9, 0,   1, 9, 10, 11, 9,  //
                                     9, 2,   3, 9, 12, 13, 9,  //
                                     9, 9,   9, 9, 9,  9,  9,  //
                                     9, 255, 0, 9, 9,  9,  9,  //
                                     9, 21,  21, 9, 9, 9,  9,  //
                                     9, 9,   9, 9, 9,  9,  9};
  CHECK(g.pixels == want);
  CHECK_THROWS_WITH(image_grid(zeros({2, 2, 2, 2}), 1),
                    "image_grid: images must be [N, C, H, W] with N >= 1 and C = 1 or 3, got [2, 2, 2, 2]");
}

TEST_CASE("png: palette pictures pack indices at the fewest bits the palette needs") {
  Picture p{5, 2, 1, {0, 1, 2, 3, 0, 3, 2, 1, 0, 3}, {0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255}};
  const std::vector<uint8_t> png = encode_png(p);
  CHECK(png[24] == 2);  // IHDR bit depth: 4 colours -> 2 bits
  CHECK(png[25] == 3);  // colour type 3: palette
  const std::string bytes(png.begin(), png.end());
  CHECK(bytes.find("PLTE") != std::string::npos);
  p.pixels[0] = 4;
  CHECK_THROWS_WITH(encode_png(p), doctest::Contains("pixel index 4 outside the palette of 4 colours"));
  Picture rgb_palette{1, 1, 3, {0, 0, 0}, {0, 0, 0}};
  CHECK_THROWS_WITH(encode_png(rgb_palette), doctest::Contains("a palette holds"));
}
