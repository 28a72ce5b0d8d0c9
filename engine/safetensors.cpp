#include "engine/safetensors.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/json.h"
#include "engine/mapped_file.h"

namespace eng {

namespace {

// Same bound as the reference implementation: a header this big is a hostile or broken file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

bool host_is_little_endian() {
  uint32_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// Tensor bytes are copied to and from the file as they lie in memory, which is only the
// format's little-endian layout on a little-endian host.
void check_host(const std::string& path) {
  ENG_CHECK(host_is_little_endian(), "safetensors: ", path, ": big-endian hosts are not supported");
}

template <class... Parts>
[[noreturn]] void fail_file(const std::string& path, Parts&&... parts) {
  fail("safetensors: ", path, ": ", std::forward<Parts>(parts)...);
}

// A name as it appears in messages: quoted, with control characters escaped.
std::string quote(const std::string& s) { return Json(s).dump(); }

// F16 and BF16 tensors (as Hugging Face checkpoints hold them) are read, widened exactly to F32; never written.
enum class Half { None, F16, BF16 };

bool parse_dtype(const std::string& s, DType& out, Half& half) {
  half = s == "F16" ? Half::F16 : s == "BF16" ? Half::BF16 : Half::None;
  if (half != Half::None) {
    out = DType::F32;
    return true;
  }
  for (DType t : {DType::F32, DType::F64, DType::I64, DType::U8})
    if (s == safetensors_dtype_name(t)) {
      out = t;
      return true;
    }
  return false;
}

// IEEE binary16 -> binary32, exact: normals and subnormals rebias, infinities and NaNs keep their class.
float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) bits = sign | 0x7f800000u | (mant << 13);
  else if (exp != 0) bits = sign | ((exp + 112) << 23) | (mant << 13);
  else if (mant == 0) bits = sign;
  else {  // subnormal: mant · 2^-24, normalised
    int e = -1;
    uint32_t m = mant;
    while (!(m & 0x400)) m <<= 1, ++e;
    bits = sign | (uint32_t(112 - e) << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ---- reading ----

struct Entry {
  std::string name;
  DType dtype = DType::F32;  // in memory; F32 for an F16 or BF16 file tensor
  Half half = Half::None;
  Shape shape;
  int64_t begin = 0, end = 0;
};

class HeaderReader {
 public:
  HeaderReader(const std::string& path, int64_t data_size) : path_(path), data_size_(data_size) {}

  template <class... Parts>
  [[noreturn]] void error(Parts&&... parts) const {
    fail_file(path_, std::forward<Parts>(parts)...);
  }

  std::map<std::string, std::string> metadata(const Json& m) const {
    std::map<std::string, std::string> out;
    if (m.is_null()) return out;  // the reference implementation accepts null as "no metadata"
    if (!m.is_object()) error("\"__metadata__\" is ", json_type_name(m.type()), ", not an object");
    for (const auto& [k, v] : m.as_object()) {
      if (!v.is_string())
        error("\"__metadata__\" value of ", quote(k), " is ", json_type_name(v.type()), ", not a string");
      out[k] = v.as_string();
    }
    return out;
  }

  Entry entry(const std::string& name, const Json& j) const {
    const std::string t = "tensor " + quote(name) + ": ";
    if (name.empty()) error("empty tensor name");
    if (!j.is_object()) error(t, "entry is ", json_type_name(j.type()), ", not an object");
    for (const auto& [k, v] : j.as_object())
      if (k != "dtype" && k != "shape" && k != "data_offsets") error(t, "unknown field ", quote(k));
    const Json* dtype = j.find("dtype");
    const Json* shape = j.find("shape");
    const Json* offsets = j.find("data_offsets");
    if (!dtype) error(t, "missing \"dtype\"");
    if (!shape) error(t, "missing \"shape\"");
    if (!offsets) error(t, "missing \"data_offsets\"");

    Entry e;
    e.name = name;
    if (!dtype->is_string()) error(t, "\"dtype\" is ", json_type_name(dtype->type()), ", not a string");
    if (!parse_dtype(dtype->as_string(), e.dtype, e.half))
      error(t, "unsupported dtype ", quote(dtype->as_string()), " (supported: F32, F64, I64, U8, F16, BF16)");

    if (!shape->is_array()) error(t, "\"shape\" is ", json_type_name(shape->type()), ", not an array");
    for (const Json& d : shape->as_array()) {
      if (!d.is_int()) error(t, "\"shape\" holds ", json_type_name(d.type()), ", not only integers");
      if (d.as_int() < 0) error(t, "negative dimension ", d.as_int(), " in shape ", shape->dump());
      e.shape.push_back(d.as_int());
    }
    // Every product of dimensions must fit, not only the total (a 0 would hide an overflow that
    // row-major strides still compute), and so must the byte count.
    const int64_t elem = e.half != Half::None ? 2 : int64_t(dtype_size(e.dtype));
    int64_t product = elem;
    for (int64_t d : e.shape) {
      if (d == 0) continue;
      if (product > INT64_MAX / d) error(t, "shape ", shape->dump(), " is too large");
      product *= d;
    }
    const int64_t nbytes = shape_numel(e.shape) * elem;

    const bool pair = offsets->is_array() && offsets->as_array().size() == 2 &&
                      offsets->as_array()[0].is_int() && offsets->as_array()[1].is_int();
    if (!pair) error(t, "\"data_offsets\" must be [begin, end] with two integers, got ", offsets->dump());
    e.begin = offsets->as_array()[0].as_int();
    e.end = offsets->as_array()[1].as_int();
    if (e.begin < 0 || e.end < e.begin) error(t, "data_offsets ", offsets->dump(), " are not 0 <= begin <= end");
    if (e.end > data_size_)
      error(t, "data_offsets ", offsets->dump(), " reach past the end of the ", data_size_, "-byte data section");
    if (e.end - e.begin != nbytes)
      error(t, "data_offsets ", offsets->dump(), " hold ", e.end - e.begin, " bytes, but ",
            dtype->as_string(), " shape ", shape->dump(), " needs ", nbytes);
    return e;
  }

  // The tensors must tile the data section exactly, as the reference implementation requires.
  void check_layout(std::vector<Entry>& entries) const {
    std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    int64_t covered = 0;
    const Entry* prev = nullptr;
    for (const Entry& e : entries) {
      if (e.begin < covered)
        error("tensors ", quote(prev->name), " [", prev->begin, ", ", prev->end, "] and ", quote(e.name), " [",
              e.begin, ", ", e.end, "] overlap");
      if (e.begin > covered) error("data bytes [", covered, ", ", e.begin, ") belong to no tensor");
      covered = e.end;
      prev = &e;
    }
    if (covered != data_size_) error("data bytes [", covered, ", ", data_size_, ") belong to no tensor");
  }

 private:
  const std::string& path_;
  int64_t data_size_;
};

}  // namespace

const char* safetensors_dtype_name(DType t) {
  return t == DType::F32 ? "F32" : t == DType::F64 ? "F64" : t == DType::U8 ? "U8" : "I64";
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  check_host(path);
  const std::string where = "safetensors: " + path + ": ";
  Json header = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) {
      ENG_CHECK(valid_utf8(k), where, "a metadata key is not valid UTF-8");
      ENG_CHECK(valid_utf8(v), where, "metadata value of ", quote(k), " is not valid UTF-8");
      m.set(k, v);
    }
    header.set("__metadata__", std::move(m));
  }
  std::unordered_set<std::string> names;
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    ENG_CHECK(!name.empty(), where, "tensor names must not be empty");
    ENG_CHECK(valid_utf8(name), where, "tensor name is not valid UTF-8");
    ENG_CHECK(name != "__metadata__", where, "tensor name \"__metadata__\" is reserved");
    ENG_CHECK(names.insert(name).second, where, "duplicate tensor name ", quote(name));
    ENG_CHECK(t.defined(), where, "tensor ", quote(name), " is undefined");
    ENG_CHECK(t.device() == Device::CPU, where, "tensor ", quote(name), " is on ", device_name(t.device()),
              ", not cpu");
    const int64_t nbytes = t.numel() * int64_t(dtype_size(t.dtype()));
    Json entry = Json::object();
    entry.set("dtype", safetensors_dtype_name(t.dtype()));
    Json shape = Json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    entry.set("shape", std::move(shape));
    entry.set("data_offsets", Json::array({offset, offset + nbytes}));
    header.set(name, std::move(entry));
    offset += nbytes;
  }

  std::string text = header.dump();
  ENG_CHECK(text.size() <= kMaxHeaderBytes, where, "header of ", text.size(), " bytes exceeds the limit of ",
            kMaxHeaderBytes, " bytes that readers accept");
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as the reference pads
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = (unsigned char)(uint64_t(text.size()) >> (8 * i));

  AtomicFile file(path, "safetensors");
  file.write(prefix, 8);
  file.write(text.data(), text.size());
  for (const auto& [name, t] : tensors) {
    if (t.numel() == 0) continue;
    Tensor c = t.detach().contiguous();  // logical row-major order, outside any graph
    file.write(c.raw_data(), size_t(c.numel()) * dtype_size(c.dtype()));
  }
  file.commit();
}

namespace {

// The bytes of a file already in memory (a mapping or a caller's buffer), read like an InputFile.
struct MemoryReader {
  const uint8_t* bytes;
  int64_t size_;
  int64_t size() const { return size_; }
  void read_at(int64_t offset, void* out, size_t n, const std::string&) const {
    if (n) std::memcpy(out, bytes + offset, n);  // the layout checks keep [offset, offset + n) inside size_
  }
};

// The header of a file, validated: its metadata and its tensors' entries, tiling the data section.
struct Layout {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;  // in data order
  int64_t data_start = 0;
};

template <class Reader>
Layout read_layout(const Reader& in, const std::string& path) {
  check_host(path);
  auto error = [&](auto&&... parts) { fail_file(path, parts...); };
  const int64_t file_size = in.size();
  if (file_size < 8) error("file is ", file_size, " bytes, shorter than the 8-byte header length");

  unsigned char prefix[8];
  in.read_at(0, prefix, 8, "the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > kMaxHeaderBytes) error("header length ", n, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  if (n > uint64_t(file_size - 8))
    error("header length ", n, " is larger than the ", file_size - 8, " bytes after the length prefix");

  std::string text(size_t(n), '\0');
  in.read_at(8, text.data(), size_t(n), "the " + std::to_string(n) + "-byte header");
  Json header;
#if defined(__cpp_exceptions)
  try {
    header = Json::parse(text);
  } catch (const Error& e) {
    error("header is not valid JSON: ", e.what());
  }
#else
  header = Json::parse(text);  // without exceptions the handler gets Json's message alone (engine/error.h)
#endif
  if (!header.is_object()) error("header is ", json_type_name(header.type()), ", not a JSON object");

  Layout out;
  out.data_start = 8 + int64_t(n);
  HeaderReader reader(path, file_size - out.data_start);
  for (const auto& [key, value] : header.as_object()) {
    if (key == "__metadata__")
      out.metadata = reader.metadata(value);
    else
      out.entries.push_back(reader.entry(key, value));
  }
  reader.check_layout(out.entries);
  return out;
}

// One tensor's data read into a fresh tensor; F16 and BF16 widened exactly to F32.
template <class Reader>
Tensor read_entry(const Reader& in, const Layout& layout, const Entry& e) {
  Tensor t = empty(e.shape, e.dtype);
  if (e.end == e.begin) return t;
  const std::string what = "the data of tensor " + quote(e.name);
  if (e.half == Half::None) {
    in.read_at(layout.data_start + e.begin, t.raw_data(), size_t(e.end - e.begin), what);
    return t;
  }
  std::vector<uint16_t> bits(size_t(t.numel()));
  in.read_at(layout.data_start + e.begin, bits.data(), size_t(e.end - e.begin), what);
  float* p = t.data<float>();
  for (size_t i = 0; i < bits.size(); ++i) p[i] = e.half == Half::F16 ? f16_to_f32(bits[i]) : bf16_to_f32(bits[i]);
  return t;
}

// Tensors viewing `bytes` (the whole file) where their data is aligned to their element size; the format does not
// align data (a header is padded to 8 bytes, but an odd number of f32 before an f64 shifts it by 4), so a
// misaligned tensor is copied, and only that one.
SafetensorsFile view_layout(const uint8_t* bytes, int64_t size, const std::string& path,
                            const std::shared_ptr<const void>& keeper) {
  const MemoryReader in{bytes, size};
  Layout layout = read_layout(in, path);
  SafetensorsFile out;
  out.metadata = std::move(layout.metadata);
  for (const Entry& e : layout.entries) {
    const uint8_t* p = bytes + layout.data_start + e.begin;
    const bool aligned = reinterpret_cast<uintptr_t>(p) % dtype_size(e.dtype) == 0;
    if (e.end > e.begin && aligned && e.half == Half::None) {
      out.tensors.emplace_back(e.name, view_memory(p, e.shape, e.dtype, keeper));
      continue;
    }
    out.copied += e.end > e.begin ? 1 : 0;
    out.tensors.emplace_back(e.name, read_entry(in, layout, e));
  }
  return out;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  const InputFile in(path, "safetensors");
  Layout layout = read_layout(in, path);
  SafetensorsFile out;
  out.metadata = std::move(layout.metadata);
  for (const Entry& e : layout.entries) out.tensors.emplace_back(e.name, read_entry(in, layout, e));
  return out;
}

SafetensorsFile map_safetensors(const std::string& path) {
  const std::shared_ptr<const MappedFile> file = MappedFile::open(path, "safetensors");
  return view_layout(file->data(), int64_t(file->size()), path, file);
}

SafetensorsFile view_safetensors(const void* data, size_t size, const std::string& name,
                                 std::shared_ptr<const void> keeper) {
  ENG_CHECK(data || size == 0, "safetensors: ", name, ": null buffer of ", size, " bytes");
  ENG_CHECK(size <= size_t(INT64_MAX), "safetensors: ", name, ": buffer of ", size, " bytes is too large");
  return view_layout(static_cast<const uint8_t*>(data), int64_t(size), name, keeper);
}

}  // namespace eng
