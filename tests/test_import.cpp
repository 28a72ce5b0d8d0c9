// Imported checkpoints against tools/reference/hf_models.py: random-weight GPT-2 and LLaMA models written by plain
// PyTorch (float64) from the published architectures, in Hugging Face's format and llama2.c's (tests/fixtures/hf/),
// with their logits at every position and a greedy continuation computed there.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <fstream>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/import/import.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"
#include "tests/temp_files.h"

using namespace eng;

namespace {

const std::string kDir = "tests/fixtures/hf/";

std::map<std::string, Tensor> reference(const std::string& name) {
  std::map<std::string, Tensor> out;
  for (auto& [k, t] : load_safetensors(kDir + name + "_reference.safetensors").tensors) out.emplace(k, t);
  return out;
}

// Converts, writes the checkpoint and loads it into a model built from its metadata, as build/generate does.
std::unique_ptr<LanguageModel> converted(const ImportedModel& m, const test::TempDir& dir) {
  const std::string out = dir.file("model.safetensors");
  save_imported(out, m, "fixture");
  auto model = std::make_unique<LanguageModel>(
      TransformerConfig::from_map(read_run_config(load_safetensors(out).metadata).model));
  load_checkpoint(out, *model, nullptr);
  model->eval();
  return model;
}

void check_against_reference(const ImportedModel& m, const std::string& ref_name) {
  test::TempDir dir;
  const std::unique_ptr<LanguageModel> owned = converted(m, dir);
  const LanguageModel& model = *owned;
  const auto ref = reference(ref_name);
  NoGradGuard no_grad;
  const Tensor ids = ref.at("ids");
  const Tensor logits = squeeze(model.forward(reshape(ids, {1, ids.size(0)})), 0);
  CHECK(test::max_abs_diff(logits, ref.at("logits")) < 1e-4);
  // Greedy continuation with the recurrent form (KV cache), token for token the reference's.
  const Tensor prompt = ref.at("prompt"), want = ref.at("greedy");
  LanguageModel::State state = model.new_state();
  std::vector<int64_t> got;
  int64_t next = 0;
  for (int64_t t = 0; t < prompt.size(0) + want.size(0) - 1; ++t) {
    const int64_t id = t < prompt.size(0) ? int64_t(prompt.at({t})) : next;
    const Tensor l = model.step(from_vector(std::vector<double>{double(id)}, {1}, DType::I64), state);
    next = int64_t(argmax(l, -1).item());
    if (t + 1 >= prompt.size(0)) got.push_back(next);
  }
  std::vector<int64_t> expected;
  for (int64_t i = 0; i < want.size(0); ++i) expected.push_back(int64_t(want.at({i})));
  CHECK(got == expected);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void copy_dir(const std::string& from, const std::string& to) {
  std::filesystem::create_directories(to);
  for (const auto& e : std::filesystem::directory_iterator(from))
    std::filesystem::copy_file(e.path(), to + "/" + e.path().filename().string());
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

}  // namespace

TEST_CASE("import: GPT-2 from f32, f16 and bf16 files matches the PyTorch reference at every position") {
  for (const char* dtype : {"f32", "f16", "bf16"}) {
    CAPTURE(dtype);
    const ImportedModel m = import_hf(kDir + "gpt2-" + dtype);
    CHECK(m.config.tie_embeddings);
    CHECK(m.config.activation == Activation::GeluTanh);
    CHECK(m.config.positional == PositionalKind::Learned);
    check_against_reference(m, "gpt2");
  }
}

TEST_CASE("import: LLaMA (GQA, untied head) from f32, f16 and sharded bf16 files matches the PyTorch reference") {
  for (const char* dtype : {"f32", "f16", "bf16"}) {
    CAPTURE(dtype);
    const ImportedModel m = import_hf(kDir + "llama-" + dtype);
    CHECK(m.config.kv_heads == 2);
    CHECK(m.config.rope_theta == 1000);
    CHECK(m.config.rope_pairing == RopePairing::RotateHalf);
    check_against_reference(m, "llama");
  }
}

TEST_CASE("import: llama2.c's .bin (interleaved RoPE pairs) matches the PyTorch reference") {
  const ImportedModel m = import_llama2c(kDir + "llama2c.bin");
  CHECK(m.config.rope_pairing == RopePairing::Interleaved);
  CHECK(!m.config.tie_embeddings);
  check_against_reference(m, "llama2c");
}

TEST_CASE("import: every refusal names the file and the reason") {
  test::TempDir dir;
  const std::string d = dir.file("m");
  copy_dir(kDir + "llama-f32", d);
  CHECK(error_of([&] { import_hf(dir.file("none")); }) ==
        "convert: " + dir.file("none") + "/config.json: no such file (the directory does not exist)");
  write_text(d + "/config.json", R"({"architectures": ["BertForMaskedLM"]})");
  CHECK(error_of([&] { import_hf(d); }) ==
        "convert: " + d + "/config.json: architecture 'BertForMaskedLM' is not supported (GPT2LMHeadModel, "
        "LlamaForCausalLM)");
  std::ifstream in(kDir + "llama-f32/config.json");
  const std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = config;
    s.replace(s.find(from), from.size(), to);
    write_text(d + "/config.json", s);
  };
  with("\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}");
  CHECK(error_of([&] { import_hf(d); }) == "convert: " + d + "/config.json: rope_scaling = {\"type\":\"linear\","
        "\"factor\":2.0} is not supported (plain RoPE only)");
  with("\"intermediate_size\": 48", "\"intermediate_size\": 40");
  CHECK(error_of([&] { import_hf(d); }) == "convert: " + d + "/model.safetensors: tensor "
        "'model.layers.0.mlp.gate_proj.weight' has shape [48, 16], config.json implies [40, 16]");
  with("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
  CHECK(error_of([&] { import_hf(d); }) == "convert: " + d + ": tensor 'model.layers.2.input_layernorm.weight' is "
        "missing");
  with("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
  CHECK(error_of([&] { import_hf(d); }) == "convert: " + d + "/model.safetensors: unexpected tensor "
        "'model.layers.1.input_layernorm.weight' (the config.json describes a model without it)");
  write_text(d + "/config.json", config);
  std::filesystem::remove(d + "/model.safetensors");
  CHECK(error_of([&] { import_hf(d); }) == "convert: " + d + ": neither model.safetensors nor "
        "model.safetensors.index.json is there (pytorch_model.bin is not read: save the model with safetensors)");
  // A dtype the reader does not take: the safetensors reader names the file and the dtype.
  save_safetensors(d + "/model.safetensors", {{"x", zeros({1})}});
  std::string bytes;
  {
    std::ifstream f(d + "/model.safetensors", std::ios::binary);
    bytes.assign((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  bytes.replace(bytes.find("\"F32\""), 5, "\"F8X\"");
  test::write_file(d + "/model.safetensors", std::vector<uint8_t>(bytes.begin(), bytes.end()));
  CHECK(error_of([&] { import_hf(d); }) == "safetensors: " + d + "/model.safetensors: tensor \"x\": unsupported "
        "dtype \"F8X\" (supported: F32, F64, I64, U8, F16, BF16)");

  // llama2.c: a truncated file, a newer export version.
  std::ifstream bin(kDir + "llama2c.bin", std::ios::binary);
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
  test::write_file(dir.file("short.bin"), std::vector<uint8_t>(b.begin(), b.end() - 4));
  CHECK(error_of([&] { import_llama2c(dir.file("short.bin")); }) ==
        "convert: " + dir.file("short.bin") + ": " + std::to_string(b.size() - 4) + " bytes, but the header's sizes "
        "need " + std::to_string(b.size()) + " (28 + 4 x " + std::to_string((b.size() - 28) / 4) + " floats)");
  test::write_file(dir.file("v1.bin"), test::from_hex("32346b61010000000000000000000000000000000000000000000000"));
  CHECK(error_of([&] { import_llama2c(dir.file("v1.bin")); }) ==
        "convert: " + dir.file("v1.bin") + ": a llama2.c file of export version 1 or later (magic 'ak42'); only the "
        "legacy version 0 that run.c reads is supported");
}
