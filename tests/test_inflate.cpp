// The DEFLATE decoder against streams made by zlib (Python's zlib module, level 9), the checksums
// against their published check values, and the errors on corrupt input.
#include "datasets/inflate.h"

#include <doctest/doctest.h>

#include <string>

#include "engine/checksum.h"
#include "tests/temp_files.h"

using namespace eng;
using eng::test::from_hex;

namespace {

// zlib.compress(text, 9) of dynamic_text(): one dynamic-Huffman block.
const char* kDynamicZlib =
    "78da7d55cb6ec3300cbbeb2bfc6b166aac05d2adc07af2d76f89e28894e55e9cc4b65e24a5b4d7ef63fbf92eed7cf6f6aee5"
    "ab3e9fb5bceffb7bbf16dbb575df9061736bdbfff17ec54cecbb6eaf7b2dba6f90f3635feca6ba915def78bd2d73130f6976"
    "f68d199a575baf3781a4749c687403a9509d6ea6ecdbd1f14864e4209e899f8716c94c11a900adfb8e203b1b93699f8b44a4"
    "a18260389e76eab1891b00d218a17a5b428e5336ae9a21940008d90a12446ecd10c15b413b12b9820be2667780ee59050082"
    "50de233085436a121825e37d2a1a32211f128903fba8ebc18280cb49312ee04c810102cd3ad339bd642e0aaa214d107afce5"
    "2dc8f29df847e0e0f0c88325c8610086d80828a669f22c5bce1d4abc403d4b22a08e3a71464b281436a04e20446207663162"
    "8f1fd7838e71f07ed2e0516b8fc512b5183b6902614c882ed7363625a58d3a240b65194313d38c704c820f00f8539e53a36a"
    "74c14d3afd06e1d587330e41c62c9d7a89b865851ad241a31f1965ec7af82186b40d1e9d879c26f2491a7d812c2a37e991c2"
    "c38ce639fd28880bec7ca111457e3b170b12923f314e4c3a";
const char* kTwoMemberGzip =
    "1f8b081e000000000203030078797a6e616d652e747874006120636f6d6d656e7400daadcb48cdc9c957c84022cbf38b7252"
    "b80088d95be0180000001f8b08000000000002032b4e4dcecf4b51c84dcd4d4a2de2020036184b0e0e000000";
// The text of kDynamicZlib: 400 words drawn by an LCG from eight, ten to a line.
std::string dynamic_text() {
  const char* words[8] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"};
  uint64_t x = 12345;
  std::string out;
  for (int i = 0; i < 400; ++i) {
    x = (x * 1103515245 + 12345) % (uint64_t(1) << 31);
    out += words[(x >> 16) % 8];
    out += i % 10 == 9 ? '\n' : ' ';
  }
  return out;
}

std::string text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

TEST_CASE("checksum: crc32 and adler32 match their check values") {
  const std::string nine = "123456789";
  const auto* p = reinterpret_cast<const uint8_t*>(nine.data());
  CHECK(crc32(p, 9) == 0xCBF43926u);
  CHECK(crc32(p + 4, 5, crc32(p, 4)) == 0xCBF43926u);  // running over pieces
  CHECK(crc32(p, 0) == 0);
  const std::string wiki = "Wikipedia";
  CHECK(adler32(reinterpret_cast<const uint8_t*>(wiki.data()), wiki.size()) == 0x11E60398u);
  CHECK(adler32(p, 0) == 1);
  // past zlib's 5552-byte block, where the sums must be reduced before they overflow
  std::vector<uint8_t> ff(100000, 0xFF);
  uint64_t a = 1, b = 0;
  for (uint8_t v : ff) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  CHECK(adler32(ff.data(), ff.size()) == uint32_t(b << 16 | a));
}

TEST_CASE("checksum: crc32 past 64 KiB (four interleaved parts, joined) == the bitwise definition") {
  std::vector<uint8_t> data(200003);
  uint32_t x = 12345;
  for (uint8_t& v : data) v = uint8_t((x = x * 1103515245u + 12345u) >> 24);
  for (size_t n : {size_t(65536), size_t(65543), data.size()}) {
    CAPTURE(n);
    uint32_t c = ~0u;  // one bit at a time, from the polynomial alone
    for (size_t i = 0; i < n; ++i) {
      c ^= data[i];
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    }
    CHECK(crc32(data.data(), n) == ~c);
  }
  // running over two pieces, each past 64 KiB
  CHECK(crc32(data.data() + 70001, data.size() - 70001, crc32(data.data(), 70001)) ==
        crc32(data.data(), data.size()));
}

TEST_CASE("inflate: a dynamic-Huffman zlib stream from zlib decodes to its text") {
  const std::vector<uint8_t> z = from_hex(kDynamicZlib);
  REQUIRE(((z[2] >> 1) & 3) == 2);  // the block really is dynamic
  CHECK(text(zlib_decompress(z, "dyn")) == dynamic_text());
  // raw DEFLATE: `consumed` stops before the 4-byte Adler-32 trailer
  size_t used = 0;
  CHECK(text(inflate_raw(z.data() + 2, z.size() - 2, "dyn", &used)) == dynamic_text());
  CHECK(used == z.size() - 6);
}

TEST_CASE("inflate: gzip members with every optional header field, concatenated") {
  const std::vector<uint8_t> g = from_hex(kTwoMemberGzip);
  CHECK(is_gzip(g));
  CHECK(text(gunzip(g, "two.gz")) == "hello hello hello world\nsecond member\n");
  CHECK_FALSE(is_gzip(bytes("\x00\x00\x08\x03")));
}

TEST_CASE("inflate: corrupt input fails naming the file and the problem") {
  const std::vector<uint8_t> g = from_hex(kTwoMemberGzip);
  std::vector<uint8_t> cut(g.begin(), g.begin() + 50);
  CHECK_THROWS_WITH(gunzip(cut, "cut.gz"), doctest::Contains("inflate: cut.gz: truncated DEFLATE data"));
  std::vector<uint8_t> no_trailer(g.begin(), g.end() - 4);
  CHECK_THROWS_WITH(gunzip(no_trailer, "t.gz"), doctest::Contains("gzip: t.gz: truncated member"));
  std::vector<uint8_t> bad_crc = g;
  bad_crc[g.size() - 8] ^= 1;  // second member's CRC-32
  CHECK_THROWS_WITH(gunzip(bad_crc, "c.gz"), "gzip: c.gz: CRC-32 mismatch: the decompressed data are corrupt");
  std::vector<uint8_t> bad_len = g;
  bad_len[g.size() - 4] ^= 1;
  CHECK_THROWS_WITH(gunzip(bad_len, "l.gz"), doctest::Contains("gzip: l.gz: length mismatch"));
  std::vector<uint8_t> garbage = g;
  garbage.insert(garbage.end(), 20, 0);
  CHECK_THROWS_WITH(gunzip(garbage, "g.gz"), "gzip: g.gz: bad magic 0 0 at byte 94 (gzip: 31 139)");
  std::vector<uint8_t> method = g;
  method[2] = 7;
  CHECK_THROWS_WITH(gunzip(method, "m.gz"), "gzip: m.gz: compression method 7 is not DEFLATE (8)");

  // block type 3 is reserved; a stored block whose length disagrees with its complement
  CHECK_THROWS_WITH(inflate_raw(from_hex("07").data(), 1, "x"), "inflate: x: invalid block type 3");
  const auto stored = from_hex("01050000ff");
  CHECK_THROWS_WITH(inflate_raw(stored.data(), stored.size(), "s"),
                    "inflate: s: stored block length does not match its complement");
  // fixed block: literal 'a' then a match of length 3 at distance 2 (only one byte exists)
  const auto far = from_hex("4b044200");
  CHECK_THROWS_WITH(inflate_raw(far.data(), far.size(), "f"),
                    "inflate: f: distance reaches back before the start of the data");

  std::vector<uint8_t> z = from_hex(kDynamicZlib);
  CHECK_THROWS_WITH(zlib_decompress(z, "d", 100), doctest::Contains("exceed the size limit"));
  z.back() ^= 1;
  CHECK_THROWS_WITH(zlib_decompress(z, "d"), "zlib: d: Adler-32 mismatch: the decompressed data are corrupt");
  z = from_hex(kDynamicZlib);
  z[1] ^= 1;
  CHECK_THROWS_WITH(zlib_decompress(z, "d"), "zlib: d: header check bits are wrong");
}
