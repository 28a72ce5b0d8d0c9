// Zero-copy loading (engine/mapped_file.h, map_safetensors / view_safetensors, bind_checkpoint) against the
// reader that copies every byte (load_safetensors, load_checkpoint): the same tensors bit for bit, the same refusals
// with the same messages, views that keep their memory alive and refuse writes.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "engine/skip_init.h"
#include "models/checkpoint.h"
#include "ops/reduce.h"
#include "models/transformer.h"
#include "tests/temp_files.h"

using namespace eng;
using eng::test::TempDir;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), size_t(a.numel()) * dtype_size(a.dtype())) == 0;
}

void check_same(const SafetensorsFile& a, const SafetensorsFile& b) {
  REQUIRE(a.tensors.size() == b.tensors.size());
  CHECK(a.metadata == b.metadata);
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    CHECK(a.tensors[i].first == b.tensors[i].first);
    CHECK(same_bits(a.tensors[i].second, b.tensors[i].second));
  }
}

// The error message `read` throws, or "" when it accepts.
template <class F>
std::string error_of(F read) {
  try {
    read();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// How many lines of /proc/self/maps name `path`: whether the file is mapped now.
int mappings_of(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find(path) != std::string::npos;
  return n;
}

std::vector<std::pair<std::string, Tensor>> sample_tensors() {
  Rng rng(7);
  return {{"a", randn({3, 5}, rng)}, {"ids", from_vector(std::vector<double>{4, -2, 9}, {3}, DType::I64)},
          {"d", randn({2, 2}, rng, DType::F64)}, {"empty", zeros({0, 4})}};
}

TransformerConfig small_lm() {
  TransformerConfig c;
  c.vocab = 11;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 24;
  c.decoder_layers = 2;
  c.max_len = 16;
  return c;
}

}  // namespace

TEST_CASE("zero copy: mapped and buffer files equal the read file bit for bit, and view it") {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  save_safetensors(path, sample_tensors(), {{"k", "v"}});
  const SafetensorsFile read = load_safetensors(path), mapped = map_safetensors(path);
  check_same(read, mapped);
  // [3, 5] f32 fills 60 bytes, so the i64 and the f64 after it are 4 bytes off their 8-byte alignment: copied.
  CHECK(mapped.copied == 2);
  CHECK(mapped.tensors[0].second.storage()->read_only);
  const std::vector<uint8_t> bytes = read_file_bytes(path, "test");
  const SafetensorsFile viewed = view_safetensors(bytes.data(), bytes.size(), "weights.bin");
  check_same(read, viewed);
  // A view points into the memory it was given, not at a copy.
  const Tensor& a = viewed.tensors[0].second;
  CHECK(static_cast<const uint8_t*>(a.raw_data()) >= bytes.data());
  CHECK(static_cast<const uint8_t*>(a.raw_data()) < bytes.data() + bytes.size());
  CHECK(a.storage()->read_only);
  CHECK_FALSE(read.tensors[0].second.storage()->read_only);
}

TEST_CASE("zero copy: tensors whose data is misaligned are copied, the others viewed") {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  // One f32 before the f64 puts the f64 at data offset 4: the format does not align it.
  save_safetensors(path, {{"one", full({1}, 2.5)}, {"d", from_vector(std::vector<double>{1.5, -3}, {2}, DType::F64)}});
  const SafetensorsFile read = load_safetensors(path), mapped = map_safetensors(path);
  check_same(read, mapped);
  CHECK(mapped.copied == 1);
  CHECK(mapped.tensors[0].second.storage()->read_only);        // the f32 is viewed
  CHECK_FALSE(mapped.tensors[1].second.storage()->read_only);  // the f64 was copied
  // A caller's buffer at an odd address: every tensor is copied, none is read misaligned.
  const std::vector<uint8_t> bytes = read_file_bytes(path, "test");
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  const SafetensorsFile odd = view_safetensors(shifted.data() + 1, bytes.size(), "odd");
  check_same(read, odd);
  CHECK(odd.copied == 2);
}

TEST_CASE("zero copy: a view keeps the file mapped after its loader returns, and only as long") {
  TempDir dir;
  const std::string path = dir.file("keep.safetensors");
  save_safetensors(path, sample_tensors());
  Tensor kept;
  {
    const SafetensorsFile f = map_safetensors(path);
    kept = f.tensors[0].second;
  }
  CHECK(mappings_of(path) == 1);
  std::filesystem::remove(path);  // the mapping holds the file's pages, not its name
  CHECK(same_bits(kept, sample_tensors()[0].second));
  kept = Tensor();
  CHECK(mappings_of(path) == 0);
}

TEST_CASE("zero copy: views refuse writes and gradients") {
  TempDir dir;
  const std::string path = dir.file("ro.safetensors");
  save_safetensors(path, sample_tensors());
  const Tensor a = map_safetensors(path).tensors[0].second;
  const std::string why =
      "views read-only memory (a mapped or caller's checkpoint); clone() it for a copy that can be written";
  CHECK(error_of([&] { a.fill(0); }) == "fill: tensor of shape [3, 5] " + why);
  CHECK(error_of([&] { a.copy_from(zeros({3, 5})); }) == "copy_from: tensor of shape [3, 5] " + why);
  CHECK(error_of([&] { a.set_at({0, 0}, 1); }) == "set_at: tensor of shape [3, 5] " + why);
  Tensor b = a;
  CHECK(error_of([&] { b.set_requires_grad(); }) == "set_requires_grad: tensor of shape [3, 5] " + why);
  Tensor c = a.clone();  // a copy is an ordinary tensor
  c.fill(1);
  c.set_requires_grad();
  CHECK(same_bits(a, sample_tensors()[0].second));
}

TEST_CASE("zero copy: truncated and corrupt files are refused as the reader refuses them, naming the file") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors"), bad = dir.file("bad.safetensors");
  save_safetensors(good, sample_tensors());
  const std::vector<uint8_t> bytes = read_file_bytes(good, "test");
  for (size_t len : {size_t(0), size_t(5), size_t(8), size_t(40), bytes.size() - 1}) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + std::ptrdiff_t(len));
    eng::test::write_file(bad, cut);
    const std::string read = error_of([&] { load_safetensors(bad); });
    CAPTURE(len);
    CHECK(read.rfind("safetensors: " + bad + ": ", 0) == 0);
    CHECK(error_of([&] { map_safetensors(bad); }) == read);
    const std::string in_memory = error_of([&] { view_safetensors(cut.data(), cut.size(), bad); });
    CHECK(in_memory == read);
  }
  std::vector<uint8_t> hostile = bytes;
  hostile[0] = 0xff;  // a header length past the end
  eng::test::write_file(bad, hostile);
  CHECK(error_of([&] { map_safetensors(bad); }) == error_of([&] { load_safetensors(bad); }));
  CHECK(error_of([&] { map_safetensors(dir.path); }) ==
        "safetensors: " + dir.path + ": is a directory, not a regular file");
}

TEST_CASE("zero copy: a model bound to a mapped checkpoint equals one loaded by copy, and is not trained") {
  TempDir dir;
  const std::string path = dir.file("lm.safetensors"), stripped = dir.file("lm.infer.safetensors");
  LanguageModel trained(small_lm());
  Adam adam(trained.named_parameters(), 1e-3);
  const Tensor ids = from_vector(std::vector<double>{1, 4, 2, 9, 0, 3}, {1, 6}, DType::I64);
  sum(trained.forward(ids)).backward();
  adam.step();  // the optimizer has state to save
  save_checkpoint(path, trained, &adam, run_config_metadata({trained.config().to_map(), {{"name", "copy"}}}));

  TransformerConfig other = small_lm();
  other.seed = 99;  // different initial weights, all overwritten by the load
  LanguageModel copied(other), bound(other);
  load_checkpoint(path, copied, nullptr);
  const SafetensorsFile mapped = map_safetensors(path);
  bind_checkpoint(mapped, path, bound);
  copied.eval();
  bound.eval();
  NoGradGuard no_grad;
  CHECK(same_bits(copied.forward(ids), bound.forward(ids)));
  // The same from a caller's buffer, which the caller keeps (no keeper).
  const std::vector<uint8_t> bytes = read_file_bytes(path, "test");
  LanguageModel from_buffer(other);
  bind_checkpoint(view_safetensors(bytes.data(), bytes.size(), "buffer"), "buffer", from_buffer);
  from_buffer.eval();
  CHECK(same_bits(copied.forward(ids), from_buffer.forward(ids)));
  CHECK(static_cast<const uint8_t*>(from_buffer.head->weight.raw_data()) > bytes.data());
  for (const auto& param : bound.named_parameters()) {  // not a structured binding: CAPTURE takes it in a lambda
    CAPTURE(param.first);
    CHECK(param.second.storage()->read_only);
    CHECK_FALSE(param.second.requires_grad());
  }

  // The inference-only file: parameters and buffers, no optimizer state, a checksum of its own.
  CHECK(mapped.tensors.size() > trained.named_parameters().size());
  save_inference_checkpoint(stripped, mapped);
  const SafetensorsFile infer = map_safetensors(stripped);
  for (const auto& [name, t] : infer.tensors) CHECK(name.rfind("optim.", 0) != 0);
  CHECK(infer.metadata.count("optimizer") == 0);
  CHECK(check_checksum(infer).intact());
  LanguageModel from_stripped(other);
  bind_checkpoint(infer, stripped, from_stripped);
  from_stripped.eval();
  CHECK(same_bits(copied.forward(ids), from_stripped.forward(ids)));
}

TEST_CASE("zero copy: a corrupt checkpoint is refused by the inference load, the model unchanged") {
  TempDir dir;
  const std::string path = dir.file("lm.safetensors");
  LanguageModel trained(small_lm());
  save_checkpoint(path, trained, nullptr, run_config_metadata({trained.config().to_map(), {}}));
  std::vector<uint8_t> bytes = read_file_bytes(path, "test");
  bytes[bytes.size() - 3] ^= 0x10;  // one bit of the last weight
  eng::test::write_file(path, bytes);
  TransformerConfig other = small_lm();
  other.seed = 5;
  LanguageModel model(other);
  const Tensor before = model.head->weight.clone();
  const std::string error = error_of([&] { bind_checkpoint(map_safetensors(path), path, model); });
  CHECK(error.rfind("checkpoint " + path + ": the tensor data is corrupt (CRC-32 ", 0) == 0);
  CHECK(same_bits(model.head->weight, before));
  CHECK_FALSE(model.head->weight.storage()->read_only);
}

TEST_CASE("zero copy: a model built without drawing its weights, then bound, equals one built and loaded as usual") {
  Rng rng(3), same(3);
  {
    SkipRandomInitGuard skip;
    CHECK(skipping_random_init());
    CHECK(randn({2, 3}, rng).shape() == Shape{2, 3});
    CHECK(rand({4}, rng).shape() == Shape{4});
  }
  CHECK_FALSE(skipping_random_init());
  CHECK(same_bits(randn({5}, rng), randn({5}, same)));  // the guard drew nothing
  TempDir dir;
  const std::string path = dir.file("lm.safetensors");
  LanguageModel trained(small_lm());
  save_checkpoint(path, trained, nullptr, run_config_metadata({trained.config().to_map(), {}}));
  std::unique_ptr<LanguageModel> skipped;
  {
    SkipRandomInitGuard skip;
    skipped = std::make_unique<LanguageModel>(small_lm());
  }
  bind_checkpoint(map_safetensors(path), path, *skipped);
  skipped->eval();
  trained.eval();
  const Tensor ids = from_vector(std::vector<double>{1, 4, 2, 9}, {1, 4}, DType::I64);
  NoGradGuard no_grad;
  CHECK(same_bits(trained.forward(ids), skipped->forward(ids)));
}
