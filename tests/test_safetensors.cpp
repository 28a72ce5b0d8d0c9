#include "engine/safetensors.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/error.h"
#include "ops/view.h"

using namespace eng;

namespace {

// A fresh directory under /tmp, removed with everything in it at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/eng_safetensors_XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string u64le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xFF);
  return s;
}

// A file made by hand: length prefix, header text as given (no padding), data bytes.
std::string st_bytes(const std::string& header, const std::string& data = "") {
  return u64le(header.size()) + header + data;
}

// The message load_safetensors throws for `bytes` written to `path`, without the
// "safetensors: <path>: " prefix (checked here once for all the hostile files).
std::string load_error(const std::string& path, const std::string& bytes) {
  write_bytes(path, bytes);
  try {
    load_safetensors(path);
  } catch (const Error& e) {
    std::string msg = e.what(), prefix = "safetensors: " + path + ": ";
    if (msg.compare(0, prefix.size(), prefix) != 0) return "missing prefix: " + msg;
    return msg.substr(prefix.size());
  }
  return "no error";
}

std::string entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

}  // namespace

TEST_CASE("safetensors: tensors and metadata round trip exactly") {
  TempDir dir;
  const std::string p = dir.file("model.safetensors");

  Tensor a = from_vector(std::vector<float>{1.5f, -2.25f, 3e-7f, 1e30f, -0.0f, 6}, {2, 3});  // f32
  Tensor b = from_vector({1e-300, -0.0, 3.141592653589793, 1.0 / 3}, {4}, DType::F64);
  Tensor c = empty({3}, DType::I64);
  c.data<int64_t>()[0] = (int64_t(1) << 62) + 1;  // not representable as a double
  c.data<int64_t>()[1] = -5;
  c.data<int64_t>()[2] = INT64_MIN;
  Tensor s = scalar_tensor(3.5);                              // 0-d
  Tensor e = zeros({0, 5});                                   // empty
  Tensor base = from_vector({0, 1, 2, 3, 4, 5}, {2, 3}, DType::F64);
  Tensor v = transpose(base);                                 // [3, 2], non-contiguous
  Tensor x = expand(from_vector(std::vector<float>{7, 8}, {2, 1}), {2, 3});     // stride 0
  REQUIRE(!v.is_contiguous());
  Tensor g = from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad();

  std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "100"}, {"note", "caf\xC3\xA9 \"q\"\n\\"}};
  std::vector<std::pair<std::string, Tensor>> in = {{"a", a}, {"e", e},    {"b", b}, {"s", s},
                                                    {"v", v}, {"c", c},    {"x", x}, {"layer.0/w \xF0\x9F\x98\x80", g}};
  save_safetensors(p, in, meta);
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), {}) == 1);  // no temporary file left

  SafetensorsFile f = load_safetensors(p);
  CHECK(f.metadata == meta);
  REQUIRE(f.tensors.size() == in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    CAPTURE(in[i].first);
    const Tensor& want = in[i].second;
    const Tensor& got = f.tensors[i].second;
    CHECK(f.tensors[i].first == in[i].first);  // the given order is kept
    CHECK(got.dtype() == want.dtype());
    CHECK(got.shape() == want.shape());
    CHECK(got.is_contiguous());
    CHECK(!got.requires_grad());
    Tensor wc = want.detach().contiguous();
    CHECK(std::memcmp(got.raw_data(), wc.raw_data(), size_t(want.numel()) * dtype_size(want.dtype())) == 0);
  }
  CHECK(f.tensors[4].second.to_vector() == std::vector<double>{0, 3, 1, 4, 2, 5});  // transposed order
  CHECK(f.tensors[6].second.to_vector() == std::vector<double>{7, 7, 7, 8, 8, 8});
  CHECK(f.tensors[5].second.data<int64_t>()[0] == (int64_t(1) << 62) + 1);
  CHECK(f.tensors[5].second.data<int64_t>()[2] == INT64_MIN);
  CHECK(std::signbit(f.tensors[2].second.data<double>()[1]));
  CHECK(f.tensors[3].second.dim() == 0);
  CHECK(f.tensors[3].second.item() == 3.5);
  CHECK(f.tensors[1].second.shape() == Shape{0, 5});

  // saving again over the file replaces it; no tensors and no metadata is a valid file too
  save_safetensors(p, {});
  SafetensorsFile empty_file = load_safetensors(p);
  CHECK(empty_file.tensors.empty());
  CHECK(empty_file.metadata.empty());
  CHECK(read_bytes(p) == u64le(8) + "{}      ");
}

TEST_CASE("safetensors: the bytes on disk follow the format exactly") {
  TempDir dir;
  const std::string p = dir.file("tiny.safetensors");
  Tensor w = from_vector(std::vector<float>{1, -2}, {2});  // f32: 00 00 80 3f, 00 00 00 c0
  Tensor n = empty({}, DType::I64);
  n.data<int64_t>()[0] = 258;  // 02 01 00 00 00 00 00 00
  save_safetensors(p, {{"w", w}, {"n", n}}, {{"k", "v"}});

  const std::string json = R"({"__metadata__":{"k":"v"},)"
                           R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("n":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})";
  REQUIRE(json.size() == 132);  // 132 = 16 * 8 + 4: four spaces pad the header to 136 = 0x88
  const std::string expected = std::string("\x88\0\0\0\0\0\0\0", 8) + json + "    " +
                               std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8) +
                               std::string("\x02\x01\x00\x00\x00\x00\x00\x00", 8);
  const std::string got = read_bytes(p);
  CHECK(got.size() == 8 + 136 + 16);
  CHECK(got == expected);

  // files from other writers: an unpadded header, whitespace, keys in another order, null metadata
  const std::string q = dir.file("other.safetensors");
  write_bytes(q, st_bytes(R"( { "__metadata__" : null , "z" : {"shape":[1],"data_offsets":[0,8],"dtype":"F64"} } )",
                          std::string("\0\0\0\0\0\0\xf0\x3f", 8)));
  SafetensorsFile f = load_safetensors(q);
  REQUIRE(f.tensors.size() == 1);
  CHECK(f.tensors[0].first == "z");
  CHECK(f.tensors[0].second.to_vector() == std::vector<double>{1.0});
  CHECK(f.metadata.empty());
}

// Reference: the bit layouts of IEEE binary16 and bfloat16 written out with ldexp, not the reader's shifts.
TEST_CASE("safetensors: F16 and BF16 tensors are read widened exactly to F32") {
  TempDir dir;
  const std::string p = dir.file("half.safetensors");
  auto f16_value = [](uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double mag = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -mag : mag;
  };
  std::vector<uint16_t> f16_bits;  // every exponent, a few mantissas, both signs: normals, subnormals, inf, NaN
  for (uint16_t e = 0; e < 32; ++e)
    for (uint16_t m : {0, 1, 0x155, 0x200, 0x3ff})
      for (uint16_t sign : {0, 0x8000}) f16_bits.push_back(uint16_t(sign | e << 10 | m));
  const std::vector<uint16_t> bf16_bits{0x0000, 0x3f80, 0xbf80, 0x4049, 0x0001, 0x7f80, 0xff80, 0x3e4d};
  std::string data;
  for (uint16_t b : f16_bits) data += char(b & 0xff), data += char(b >> 8);
  for (uint16_t b : bf16_bits) data += char(b & 0xff), data += char(b >> 8);
  const int64_t n16 = int64_t(f16_bits.size()) * 2, total = n16 + int64_t(bf16_bits.size()) * 2;
  const std::string a_entry =
      entry("F16", "[" + std::to_string(f16_bits.size()) + "]", "[0," + std::to_string(n16) + "]");
  const std::string b_entry = entry("BF16", "[8]", "[" + std::to_string(n16) + "," + std::to_string(total) + "]");
  write_bytes(p, st_bytes("{\"a\":" + a_entry + ",\"b\":" + b_entry + "}", data));
  const SafetensorsFile f = load_safetensors(p);
  REQUIRE(f.tensors.size() == 2);
  const Tensor& a = f.tensors[0].second;
  const Tensor& b = f.tensors[1].second;
  CHECK(a.dtype() == DType::F32);
  for (size_t i = 0; i < f16_bits.size(); ++i) {
    const double want = f16_value(f16_bits[i]), got = a.data<float>()[i];
    if (std::isnan(want)) CHECK(std::isnan(got));
    else CHECK(got == want);
  }
  for (size_t i = 0; i < bf16_bits.size(); ++i) {
    const uint32_t bits = uint32_t(bf16_bits[i]) << 16;  // bfloat16 is the top half of a binary32
    const int e = int(bits >> 23 & 0xff);
    const uint32_t m = bits & 0x7fffff;
    const double mag = e == 255 ? INFINITY : e == 0 ? std::ldexp(m, -149) : std::ldexp(0x800000 | m, e - 150);
    CHECK(double(b.data<float>()[i]) == ((bits >> 31) ? -mag : mag));
  }
}

TEST_CASE("safetensors: tensors come back in the order of their data") {
  TempDir dir;
  const std::string p = dir.file("order.safetensors");
  // header order differs from data order; zero-size tensors may sit at any boundary
  std::string header = "{\"b\":" + entry("F32", "[1]", "[4,8]") + ",\"z\":" + entry("F32", "[0]", "[4,4]") +
                       ",\"a\":" + entry("F32", "[1]", "[0,4]") + "}";
  write_bytes(p, st_bytes(header, std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8)));
  SafetensorsFile f = load_safetensors(p);
  REQUIRE(f.tensors.size() == 3);
  CHECK(f.tensors[0].first == "a");
  CHECK(f.tensors[1].first == "z");
  CHECK(f.tensors[2].first == "b");
  CHECK(f.tensors[0].second.item() == 1.0);
  CHECK(f.tensors[2].second.item() == 2.0);
}

TEST_CASE("safetensors: hostile files are refused with a precise message") {
  TempDir dir;
  const std::string p = dir.file("bad.safetensors");
  const std::string f32x2(8, '\0');
  auto one = [](const std::string& e) { return "{\"t\":" + e + "}"; };

  // length prefix
  CHECK(load_error(p, "") == "file is 0 bytes, shorter than the 8-byte header length");
  CHECK(load_error(p, std::string("\x02\0\0\0\0", 5)) == "file is 5 bytes, shorter than the 8-byte header length");
  CHECK(load_error(p, u64le(uint64_t(1) << 60) + "{}") ==
        "header length 1152921504606846976 exceeds the limit of 100000000 bytes");
  CHECK(load_error(p, u64le(~uint64_t(0)) + "{}") ==
        "header length 18446744073709551615 exceeds the limit of 100000000 bytes");
  CHECK(load_error(p, u64le(100) + "{}") == "header length 100 is larger than the 2 bytes after the length prefix");

  // header JSON
  CHECK(load_error(p, st_bytes("{\"a\":")) == "header is not valid JSON: json: unexpected end of input at byte 5");
  CHECK(load_error(p, st_bytes("{} x")) == "header is not valid JSON: json: trailing characters after the value at byte 3");
  CHECK(load_error(p, st_bytes(std::string("{}\0\0", 4))) ==
        "header is not valid JSON: json: trailing characters after the value at byte 2");
  CHECK(load_error(p, st_bytes("{\"\xFF\":1}")) == "header is not valid JSON: json: invalid UTF-8 in a string at byte 2");
  CHECK(load_error(p, st_bytes("[]")) == "header is an array, not a JSON object");
  CHECK(load_error(p, st_bytes("7")) == "header is an integer, not a JSON object");
  CHECK(load_error(p, st_bytes("{\"t\":" + entry("F32", "[2]", "[0,8]") + ",\"t\":" + entry("F32", "[2]", "[0,8]") + "}",
                               f32x2)) == "header is not valid JSON: json: duplicate key \"t\" at byte 54");

  // metadata
  CHECK(load_error(p, st_bytes(R"({"__metadata__":"x"})")) == "\"__metadata__\" is a string, not an object");
  CHECK(load_error(p, st_bytes(R"({"__metadata__":{"k":1}})")) ==
        "\"__metadata__\" value of \"k\" is an integer, not a string");

  // entry structure
  CHECK(load_error(p, st_bytes(R"({"t":[1]})")) == "tensor \"t\": entry is an array, not an object");
  CHECK(load_error(p, st_bytes(R"({"t":{"shape":[],"data_offsets":[0,0]}})")) == "tensor \"t\": missing \"dtype\"");
  CHECK(load_error(p, st_bytes(R"({"t":{"dtype":"F32","data_offsets":[0,0]}})")) == "tensor \"t\": missing \"shape\"");
  CHECK(load_error(p, st_bytes(R"({"t":{"dtype":"F32","shape":[0]}})")) == "tensor \"t\": missing \"data_offsets\"");
  CHECK(load_error(p, st_bytes(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"x":1}})")) ==
        "tensor \"t\": unknown field \"x\"");
  CHECK(load_error(p, st_bytes("{\"\":" + entry("F32", "[0]", "[0,0]") + "}")) == "empty tensor name");
  CHECK(load_error(p, st_bytes("{\"a\\nb\":" + entry("F32", "[-1]", "[0,0]") + "}")) ==
        "tensor \"a\\nb\": negative dimension -1 in shape [-1]");  // control characters are escaped

  // dtype
  CHECK(load_error(p, st_bytes(one(R"({"dtype":4,"shape":[],"data_offsets":[0,4]})"))) ==
        "tensor \"t\": \"dtype\" is an integer, not a string");
  CHECK(load_error(p, st_bytes(one(entry("F8_E4M3", "[2]", "[0,2]")), "12")) ==
        "tensor \"t\": unsupported dtype \"F8_E4M3\" (supported: F32, F64, I64, U8, F16, BF16)");
  CHECK(load_error(p, st_bytes(one(entry("f32", "[2]", "[0,8]")), f32x2)) ==
        "tensor \"t\": unsupported dtype \"f32\" (supported: F32, F64, I64, U8, F16, BF16)");
  CHECK(load_error(p, st_bytes(one(entry("BF16", "[2]", "[0,8]")), f32x2)) ==
        "tensor \"t\": data_offsets [0,8] hold 8 bytes, but BF16 shape [2] needs 4");

  // shape
  CHECK(load_error(p, st_bytes(one(entry("F32", "2", "[0,8]")), f32x2)) ==
        "tensor \"t\": \"shape\" is an integer, not an array");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[2.0]", "[0,8]")), f32x2)) ==
        "tensor \"t\": \"shape\" holds a number, not only integers");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[\"2\"]", "[0,8]")), f32x2)) ==
        "tensor \"t\": \"shape\" holds a string, not only integers");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[2,-4]", "[0,8]")), f32x2)) ==
        "tensor \"t\": negative dimension -4 in shape [2,-4]");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[4294967296,4294967296]", "[0,8]")), f32x2)) ==
        "tensor \"t\": shape [4294967296,4294967296] is too large");
  // the byte count overflows even though the element count (2^62) fits
  CHECK(load_error(p, st_bytes(one(entry("F64", "[2147483648,2147483648]", "[0,8]")), f32x2)) ==
        "tensor \"t\": shape [2147483648,2147483648] is too large");
  // a zero dimension does not excuse an overflowing product (row-major strides would overflow)
  CHECK(load_error(p, st_bytes(one(entry("F32", "[0,4294967296,4294967296]", "[0,0]")))) ==
        "tensor \"t\": shape [0,4294967296,4294967296] is too large");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[9223372036854775808]", "[0,0]")))) ==
        "tensor \"t\": \"shape\" holds a number, not only integers");

  // data_offsets
  CHECK(load_error(p, st_bytes(one(entry("F32", "[2]", "8")), f32x2)) ==
        "tensor \"t\": \"data_offsets\" must be [begin, end] with two integers, got 8");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[2]", "[0,8,8]")), f32x2)) ==
        "tensor \"t\": \"data_offsets\" must be [begin, end] with two integers, got [0,8,8]");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[2]", "[0,8.0]")), f32x2)) ==
        "tensor \"t\": \"data_offsets\" must be [begin, end] with two integers, got [0,8.0]");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[2]", "[-8,0]")), f32x2)) ==
        "tensor \"t\": data_offsets [-8,0] are not 0 <= begin <= end");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[0]", "[8,0]")), f32x2)) ==
        "tensor \"t\": data_offsets [8,0] are not 0 <= begin <= end");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[4]", "[0,16]")), f32x2)) ==
        "tensor \"t\": data_offsets [0,16] reach past the end of the 8-byte data section");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[2]", "[9223372036854775800,9223372036854775807]")), f32x2)) ==
        "tensor \"t\": data_offsets [9223372036854775800,9223372036854775807] reach past the end of the 8-byte "
        "data section");
  CHECK(load_error(p, st_bytes(one(entry("F32", "[3]", "[0,8]")), f32x2)) ==
        "tensor \"t\": data_offsets [0,8] hold 8 bytes, but F32 shape [3] needs 12");
  CHECK(load_error(p, st_bytes(one(entry("I64", "[]", "[0,4]")), f32x2)) ==
        "tensor \"t\": data_offsets [0,4] hold 4 bytes, but I64 shape [] needs 8");

  // layout of the data section
  const std::string a08 = "\"a\":" + entry("F32", "[2]", "[0,8]");
  CHECK(load_error(p, st_bytes("{" + a08 + ",\"b\":" + entry("F32", "[2]", "[4,12]") + "}", std::string(12, '\0'))) ==
        "tensors \"a\" [0, 8] and \"b\" [4, 12] overlap");
  CHECK(load_error(p, st_bytes("{" + a08 + ",\"b\":" + entry("F32", "[2]", "[0,8]") + "}", f32x2)) ==
        "tensors \"a\" [0, 8] and \"b\" [0, 8] overlap");
  CHECK(load_error(p, st_bytes("{" + a08 + ",\"z\":" + entry("F32", "[0]", "[4,4]") + "}", f32x2)) ==
        "tensors \"a\" [0, 8] and \"z\" [4, 4] overlap");
  CHECK(load_error(p, st_bytes("{\"a\":" + entry("F32", "[1]", "[0,4]") + ",\"b\":" + entry("F32", "[1]", "[8,12]") +
                               "}", std::string(12, '\0'))) == "data bytes [4, 8) belong to no tensor");
  CHECK(load_error(p, st_bytes("{" + a08 + "}", std::string(11, '\0'))) == "data bytes [8, 11) belong to no tensor");
  CHECK(load_error(p, st_bytes("{}", "xyz")) == "data bytes [0, 3) belong to no tensor");

  // not a file
  const std::string missing = dir.file("missing.safetensors");
  CHECK_THROWS_WITH(load_safetensors(missing),
                    ("safetensors: " + missing + ": cannot open: No such file or directory").c_str());
  CHECK_THROWS_WITH(load_safetensors(dir.path),
                    ("safetensors: " + dir.path + ": is a directory, not a regular file").c_str());
}

TEST_CASE("safetensors: every truncation and many corruptions of a file fail cleanly") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors"), bad = dir.file("bad.safetensors");
  save_safetensors(good, {{"w", from_vector(std::vector<float>{1, 2, 3}, {3})}, {"i", zeros({2}, DType::I64)}}, {{"k", "v"}});
  const std::string bytes = read_bytes(good);
  for (size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    write_bytes(bad, bytes.substr(0, n));
    CHECK_THROWS_AS(load_safetensors(bad), Error);
  }
  // a flipped byte either still gives a valid file (inside the data, or a harmless header change)
  // or a clean error; never a crash or another exception type
  int refused = 0;
  for (size_t i = 0; i < bytes.size(); ++i)
    for (unsigned char x : {0x01, 0x20, 0x80, 0xff}) {
      std::string b = bytes;
      b[i] = char(b[i] ^ x);
      write_bytes(bad, b);
      try {
        load_safetensors(bad);
      } catch (const Error&) {
        ++refused;
      }
    }
  CHECK(refused > int(bytes.size()));
}

TEST_CASE("safetensors: saving is atomic and checks names") {
  TempDir dir;
  const std::string p = dir.file("ckpt.safetensors");
  Tensor t = from_vector(std::vector<float>{1, 2}, {2});
  auto files = [&] { return std::distance(std::filesystem::directory_iterator(dir.path), {}); };
  save_safetensors(p, {{"x", t}});
  const std::string before = read_bytes(p);

  auto save_error = [&](const std::vector<std::pair<std::string, Tensor>>& ts,
                        const std::map<std::string, std::string>& meta = {}) -> std::string {
    try {
      save_safetensors(p, ts, meta);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string pre = "safetensors: " + p + ": ";
  CHECK(save_error({{"x", t}, {"y", t}, {"x", t}}) == pre + "duplicate tensor name \"x\"");
  CHECK(save_error({{"", t}}) == pre + "tensor names must not be empty");
  CHECK(save_error({{"__metadata__", t}}) == pre + "tensor name \"__metadata__\" is reserved");
  CHECK(save_error({{"u", Tensor()}}) == pre + "tensor \"u\" is undefined");
  CHECK(save_error({{"\xC0\xAF", t}}) == pre + "tensor name is not valid UTF-8");
  CHECK(save_error({{"x", t}}, {{"\xFF", "v"}}) == pre + "a metadata key is not valid UTF-8");
  CHECK(save_error({{"x", t}}, {{"k", "\xFF"}}) == pre + "metadata value of \"k\" is not valid UTF-8");
  // the old file is intact and no temporary file is left behind
  CHECK(read_bytes(p) == before);
  CHECK(files() == 1);

  // a directory that does not exist: the temporary file cannot even be created
  const std::string nowhere = dir.file("no/such/dir/ckpt.safetensors");
  CHECK_THROWS_WITH(save_safetensors(nowhere, {{"x", t}}),
                    doctest::Contains(("safetensors: " + nowhere + ": cannot create " + nowhere + ".tmp.").c_str()));
  CHECK(!std::filesystem::exists(nowhere));

  // a target that is a directory is refused before anything is written; it is untouched
  const std::string dir_target = dir.file("target_dir");
  std::filesystem::create_directory(dir_target);
  std::filesystem::create_directory(dir_target + "/inside");
  CHECK_THROWS_WITH(save_safetensors(dir_target, {{"x", t}}),
                    doctest::Contains(("safetensors: " + dir_target + " is a directory, not a regular file").c_str()));
  CHECK(std::filesystem::exists(dir_target + "/inside"));
  CHECK(files() == 2);

  // success leaves no temporary file
  Tensor t2 = from_vector({5, 6, 7}, {3}, DType::F64);
  save_safetensors(p, {{"y", t2}});
  CHECK(files() == 2);
  SafetensorsFile f = load_safetensors(p);
  REQUIRE(f.tensors.size() == 1);
  CHECK(f.tensors[0].first == "y");
  CHECK(f.tensors[0].second.to_vector() == std::vector<double>{5, 6, 7});
}
