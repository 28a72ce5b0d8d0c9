// Quantized models (models/quantized.h): a KV-cache and an RNN-form model generate from q8_0 and q4_0 weights close
// to the f32 model they came from (the reference), and bit for bit the same after a round trip through an
// inference-only checkpoint; the reader's refusals, each message checked.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/quantized.h"
#include "models/transformer.h"
#include "ops/quant.h"
#include "tests/temp_files.h"

using namespace eng;

namespace {

const QuantFormat kFormats[] = {QuantFormat::Q8_0, QuantFormat::Q4_0};

}  // namespace

namespace {

TransformerConfig small_model(const std::string& attention) {
  TransformerConfig c;
  c.vocab = 16;
  c.d_model = 32;
  c.heads = 2;
  c.d_ff = 64;
  c.decoder_layers = 2;
  c.max_len = 16;
  c.attention = attention;
  c.positional = PositionalKind::Learned;
  return c;
}

// The logits of each step when the tokens 0, 3, 6, ... (mod 16) are fed one at a time.
std::vector<double> step_logits(const LanguageModel& m, int64_t steps) {
  NoGradGuard no_grad;
  auto state = m.new_state();
  std::vector<double> out;
  for (int64_t t = 0; t < steps; ++t) {
    const Tensor logits = m.step(from_vector(std::vector<double>{double(3 * t % 16)}, {1}, DType::I64), state);
    for (double v : logits.to_vector()) out.push_back(v);
  }
  return out;
}

}  // namespace

TEST_CASE("quant: a KV-cache and an RNN-form model generate from q8_0 and q4_0 weights, and from their checkpoints") {
  eng::test::TempDir dir;
  for (const char* attention : {"softmax", "causal-linear"}) {
    LanguageModel f32(small_model(attention));
    f32.eval();
    const std::vector<double> ref = step_logits(f32, 6);
    double range = 0;
    for (double v : ref) range = std::max(range, std::fabs(v));
    const std::string plain = dir.file("f32.safetensors");
    save_checkpoint(plain, f32, nullptr, run_config_metadata({f32.config().to_map(), {}}));
    for (QuantFormat f : kFormats) {
      CAPTURE(attention);
      CAPTURE(quant_format_name(f));
      LanguageModel q(small_model(attention));
      load_checkpoint(plain, q, nullptr);
      q.eval();
      const std::vector<std::string> names = quantize_model(q, f);
      // Every Linear weight (4 per attention layer, 2 per FFN, the head) and the token table; not the positions.
      CHECK(names.size() == 2 * 6 + 2);
      CHECK(q.embed.tokens.weight.dtype() == DType::U8);
      CHECK(q.head->weight.dtype() == DType::U8);
      const std::vector<double> got = step_logits(q, 6);
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(got[i] - ref[i]));
      CHECK(worst <= (f == QuantFormat::Q8_0 ? 0.02 : 0.2) * range);
      // The inference-only checkpoint loads into a fresh model and gives the same bits.
      const std::string path = dir.file(std::string("q_") + quant_format_name(f) + ".safetensors");
      std::map<std::string, std::string> meta = quant_metadata(q);
      // q4_0 keeps the token table, the head, and attention's v and out projections in q8_0
      // (models/quantized.h); the other layers take the format.
      for (const char* kept : {"head", "embed.tokens", "layers0.self_attn.v_proj", "layers1.self_attn.out_proj"})
        CHECK(meta.at(std::string("quant.model.") + kept + ".weight") == "q8_0");
      for (const char* taken :
           {"layers0.ffn.fc1", "layers1.ffn.fc2", "layers0.self_attn.q_proj", "layers1.self_attn.k_proj"})
        CHECK(meta.at(std::string("quant.model.") + taken + ".weight") == quant_format_name(f));
      save_checkpoint(path, q, nullptr, meta);
      LanguageModel loaded(small_model(attention));
      load_checkpoint(path, loaded, nullptr);
      loaded.eval();
      CHECK(step_logits(loaded, 6) == got);
      // Training refuses it.
      Adam adam(f32.named_parameters(), 1e-3);
      CHECK_THROWS_WITH(load_checkpoint(path, f32, &adam),
                        doctest::Contains("holds quantized weights (an inference-only file written by quantize)"));
    }
  }
}

TEST_CASE("quant: q4_0 keeps the ends and attention's v and out projections in q8_0, none when pure") {
  CHECK(quant_keeps_q8("head.weight"));
  CHECK(quant_keeps_q8("embed.tokens.weight"));
  CHECK(quant_keeps_q8("tgt_embed.tokens.weight"));
  CHECK(quant_keeps_q8("layers3.cross_attn.v_proj.weight"));
  CHECK(quant_keeps_q8("layers0.self_attn.out_proj.weight"));
  CHECK(!quant_keeps_q8("layers0.self_attn.v_proj.bias"));
  CHECK(!quant_keeps_q8("layers0.self_attn.q_proj.weight"));
  CHECK(!quant_keeps_q8("layers0.ffn.fc1.weight"));
  CHECK(!quant_keeps_q8("layers0.head.weight"));
  LanguageModel m(small_model("softmax"));
  CHECK(quantize_model(m, QuantFormat::Q4_0, true).size() == 2 * 6 + 2);
  for (const auto& entry : quant_metadata(m)) {  // not a structured binding: clang's C++17 cannot capture one
    CAPTURE(entry.first);
    CHECK(entry.second == "q4_0");
  }
}

TEST_CASE("quant: a model with a tied head generates from its quantized token table") {
  TransformerConfig c = small_model("softmax");
  c.tie_embeddings = true;
  LanguageModel f32(c);
  f32.eval();
  const std::vector<double> ref = step_logits(f32, 6);
  double range = 0;
  for (double v : ref) range = std::max(range, std::fabs(v));
  for (QuantFormat f : kFormats) {
    CAPTURE(quant_format_name(f));
    LanguageModel q(c);
    const auto src = f32.named_parameters(), dst = q.named_parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].second.copy_from(src[i].second);
    q.eval();
    quantize_model(q, f);
    REQUIRE(q.embed.tokens.weight.dtype() == DType::U8);
    const std::vector<double> got = step_logits(q, 6);
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(got[i] - ref[i]));
    CHECK(worst <= (f == QuantFormat::Q8_0 ? 0.02 : 0.2) * range);
    NoGradGuard no_grad;  // the parallel form reads the same quantized table
    const Tensor all = q.forward(from_vector(std::vector<double>{0, 3, 6}, {1, 3}, DType::I64));
    const std::vector<double> stepped = step_logits(q, 3), parallel = all.to_vector();
    REQUIRE(stepped.size() == parallel.size());
    for (size_t i = 0; i < stepped.size(); ++i) CHECK(std::fabs(stepped[i] - parallel[i]) <= 1e-4 * range);
  }
}

TEST_CASE("quant: a quantized Linear refuses gradients; the reader refuses bad quantized tensors") {
  Rng rng(2);
  Linear lin(32, 4, rng);
  Module& m = lin;
  quantize_model(m, QuantFormat::Q8_0);
  REQUIRE(lin.weight.dtype() == DType::U8);
  const Tensor x = randn({1, 32}, rng).set_requires_grad(true);
  CHECK_THROWS_WITH(lin.forward(x), doctest::Contains("quant_linear: quantized weights are for inference only"));

  eng::test::TempDir dir;
  const std::string good = dir.file("good.safetensors"), bad = dir.file("bad.safetensors");
  save_checkpoint(good, lin, nullptr, quant_metadata(lin));
  Linear fresh(32, 4, rng);
  load_checkpoint(good, fresh, nullptr);
  CHECK(fresh.weight.dtype() == DType::U8);
  CHECK(std::memcmp(fresh.weight.raw_data(), lin.weight.raw_data(), 36 * 4) == 0);

  // Files with a valid checksum whose quantized tensors are wrong.
  auto load_bad = [&](const Tensor& w, std::map<std::string, std::string> meta) -> std::string {
    SafetensorsFile f;
    f.tensors = {{"model.weight", w}, {"model.bias", lin.bias}};
    meta["checksum.crc32"] = check_checksum(f).actual;
    save_safetensors(bad, f.tensors, meta);
    Linear target(32, 4, rng);
    try {
      load_checkpoint(bad, target, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "loaded";
  };
  const std::string at = "checkpoint " + bad + ": ";
  const Tensor q8 = quantize(randn({4, 32}, rng), QuantFormat::Q8_0);
  const Tensor q4 = quantize(randn({4, 32}, rng), QuantFormat::Q4_0);
  CHECK(load_bad(q8, {}) ==
        at + "parameter 'weight' is u8 but no metadata key 'quant.model.weight' gives its format");
  CHECK(load_bad(q8, {{"quant.model.weight", "q5_1"}}) ==
        at + "parameter 'weight': unknown quantized format 'q5_1' (known: q8_0, q4_0)");
  CHECK(load_bad(q4, {{"quant.model.weight", "q8_0"}}) ==
        at + "parameter 'weight': q8_0 blocks of a [4, 32] weight are u8 [4, 1, 36], the file holds u8 [4, 1, 20]");
  Tensor nan_scale = empty(q8.shape(), DType::U8);
  std::memcpy(nan_scale.raw_data(), q8.raw_data(), size_t(q8.numel()));
  const float nan = std::nanf("");
  std::memcpy(static_cast<uint8_t*>(nan_scale.raw_data()) + 2 * 36, &nan, 4);
  CHECK(load_bad(nan_scale, {{"quant.model.weight", "q8_0"}}) ==
        at + "parameter 'weight': block 0 of row 2 has scale nan; scales must be finite");
  CHECK(load_bad(q8, {{"quant.model.weight", "q8_0"}, {"quant.model.other", "q8_0"}}) ==
        at + "metadata key 'quant.model.other' names no parameter of the model");
  CHECK(load_bad(q8, {{"quant.model.weight", "q8_0"}, {"quant.model.bias", "q8_0"}}) ==
        at + "parameter 'bias' cannot be held quantized by its layer (the file records q8_0)");
}
