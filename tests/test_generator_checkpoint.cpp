// The Generator's weights read straight from a checkpoint (models/generator_checkpoint.h), against the model they
// describe: the parameters LanguageModel(c) has (names, shapes, quantizable), the verdict on what the Generator runs
// against the attention classes the model is built with, and the logits of a Generator built from the model, bit
// for bit, for f32 and quantized checkpoints.
#include "models/generator_checkpoint.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/error.h"
#include "models/attention/linear.h"
#include "models/attention/softmax.h"
#include "models/quantized.h"
#include "tests/temp_files.h"

using namespace eng;

namespace {

TransformerConfig tiny(const std::string& attention) {
  TransformerConfig c;
  c.vocab = 13;
  c.d_model = 32;  // a multiple of the 32-weight quantized blocks
  c.heads = 4;
  c.d_ff = 64;
  c.decoder_layers = 2;
  c.max_len = 12;
  c.attention = attention;
  return c;
}

// The configurations of test_generator.cpp's comparison with LanguageModel::step, and some it refuses.
std::vector<std::pair<std::string, TransformerConfig>> configs() {
  std::vector<std::pair<std::string, TransformerConfig>> out;
  out.emplace_back("softmax", tiny("softmax"));
  TransformerConfig c = tiny("softmax");
  c.pre_norm = false;
  c.rms_norm = true;
  c.positional = PositionalKind::Learned;
  c.activation = Activation::Relu;
  c.kv_heads = 1;
  out.emplace_back("post-norm, rms, learned, relu, MQA", c);
  c = tiny("stateful-softmax");
  c.kv_heads = 2;
  c.positional = PositionalKind::None;
  c.activation = Activation::GeluTanh;
  c.attention_options.set("scale", "0.3");
  out.emplace_back("stateful-softmax, GQA, no positions, scale", c);
  c = tiny("softmax");
  c.tie_embeddings = true;
  c.embed_scale = 1.0;
  c.positional = PositionalKind::Learned;
  out.emplace_back("tied head, embed scale 1", c);
  c = tiny("softmax");
  c.activation = Activation::SwiGLU;
  c.bias = false;
  c.rms_norm = true;
  c.norm_eps = 1e-5;
  out.emplace_back("swiglu without biases", c);
  c = tiny("causal-linear");
  c.attention_options.set("feature_map", "relu");
  c.attention_options.set("eps", "1e-4");
  c.activation = Activation::GeGLU;
  out.emplace_back("causal-linear, relu, geglu", c);
  out.emplace_back("linear", tiny("linear"));
  c = tiny("softmax");
  c.outputs = 7;
  out.emplace_back("a head of 7 outputs", c);
  // Refused.
  c = tiny("softmax");
  c.reversible = true;
  out.emplace_back("reversible", c);
  c = tiny("softmax");
  c.mem_len = 4;
  c.positional = PositionalKind::None;
  out.emplace_back("XL memory", c);
  c = tiny("softmax");
  c.positional = PositionalKind::Rotary;
  out.emplace_back("rotary", c);
  c = tiny("linear");
  c.attention_options.set("feature_map", "poly2");
  out.emplace_back("poly2 features", c);
  out.emplace_back("performer", tiny("performer"));
  return out;
}

// What the Generator computes for an attention class: softmax with a KV cache (its subclass stateful-softmax too),
// or linear attention's RNN form with a fused feature map.
bool runs_step_form(const Attention& a) {
  if (tag_cast<const SoftmaxAttention>(&a)) return true;
  const auto* lin = tag_cast<const LinearAttention>(&a);
  return lin && (lin->feature_map().fused() == LinearFeature::EluPlusOne ||
                 lin->feature_map().fused() == LinearFeature::Relu);
}

std::string save(const test::TempDir& dir, const LanguageModel& model, const std::string& name) {
  const std::string path = dir.file(name);
  std::map<std::string, std::string> meta = run_config_metadata({model.config().to_map(), {}});
  for (const auto& [key, value] : quant_metadata(model)) meta[key] = value;
  save_checkpoint(path, model, nullptr, meta);
  return path;
}

// Both Generators fed the same ids give the same logits, bit for bit.
void check_same_logits(const LanguageModel& model, const std::string& path) {
  const SafetensorsFile file = map_safetensors(path);
  Generator from_model(model), from_file(generator_weights(file, path, model.config()));
  REQUIRE(from_file.outputs() == from_model.outputs());
  for (int64_t id : {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}) {
    const float* a = from_model.step(id);
    const float* b = from_file.step(id);
    CAPTURE(from_model.length());
    CHECK(std::vector<float>(a, a + from_model.outputs()) == std::vector<float>(b, b + from_file.outputs()));
  }
}

}  // namespace

TEST_CASE("generator checkpoint: LanguageModel's parameters and the Generator's verdict, from the config alone") {
  for (const auto& entry : configs()) {  // not a structured binding: clang's C++17 cannot capture one in CAPTURE
    const std::string& what = entry.first;
    const TransformerConfig& c = entry.second;
    CAPTURE(what);
    const LanguageModel model(c);
    CHECK(generator_unsupported(c) == Generator::unsupported(model));
    // The verdict on the attention, from the config's name, against the classes the model was built with.
    const std::string why = generator_unsupported(c);
    if (why.empty() || why.rfind("attention '", 0) == 0)
      for (const auto& layer : model.layers) CHECK(runs_step_form(layer->self_attn.mechanism()) == why.empty());
    const ModelSpec want = model_spec(model), got = language_model_spec(c);
    if (generator_unsupported(c).empty()) CHECK(want.buffers.empty());  // language_model_spec lists none
    REQUIRE(got.parameters.size() == want.parameters.size());
    for (size_t i = 0; i < want.parameters.size(); ++i) {
      CAPTURE(want.parameters[i].name);
      CHECK(got.parameters[i].name == want.parameters[i].name);
      CHECK(got.parameters[i].shape == want.parameters[i].shape);
      CHECK(got.parameters[i].dtype == want.parameters[i].dtype);
      CHECK(got.parameters[i].quantizable == want.parameters[i].quantizable);
    }
  }
}

TEST_CASE("generator checkpoint: the logits of the Generator built from the model, f32 and quantized") {
  test::TempDir dir;
  for (const auto& entry : configs()) {  // not a structured binding: clang's C++17 cannot capture one in CAPTURE
    const std::string& what = entry.first;
    const TransformerConfig& c = entry.second;
    CAPTURE(what);
    LanguageModel model(c);
    model.eval();
    if (!Generator::unsupported(model).empty()) continue;
    check_same_logits(model, save(dir, model, "f32.st"));
    for (QuantFormat f : {QuantFormat::Q8_0, QuantFormat::Q4_0}) {
      CAPTURE(quant_format_name(f));
      LanguageModel q(c);
      q.eval();
      REQUIRE(!quantize_model(q, f).empty());
      check_same_logits(q, save(dir, q, "q.st"));
    }
  }
}

TEST_CASE("generator checkpoint: refuses another model's file, an unsupported model and a bad option") {
  test::TempDir dir;
  const LanguageModel model(tiny("softmax"));
  const std::string path = save(dir, model, "m.st");
  const SafetensorsFile file = map_safetensors(path);
  TransformerConfig wider = tiny("softmax");
  wider.d_ff = 96;
  CHECK_THROWS_WITH_AS(generator_weights(file, path, wider),
                       ("checkpoint " + path + ": parameter 'layers0.ffn.fc1.weight' has shape [64, 32], the model "
                        "has [96, 32]").c_str(), Error);
  TransformerConfig gated = tiny("softmax");
  gated.activation = Activation::SwiGLU;
  CHECK_THROWS_WITH_AS(generator_weights(file, path, gated),
                       ("checkpoint " + path + ": parameter 'layers0.ffn.fc3.weight' is missing").c_str(), Error);
  TransformerConfig fewer = tiny("softmax");
  fewer.decoder_layers = 1;
  CHECK_THROWS_WITH_AS(generator_weights(file, path, fewer),
                       doctest::Contains("unknown parameter 'layers1."), Error);
  TransformerConfig reversible = tiny("softmax");
  reversible.reversible = true;
  CHECK_THROWS_WITH_AS(generator_weights(file, path, reversible),
                       ("Generator: " + path + ": the model has reversible layers; LanguageModel::step runs it")
                           .c_str(), Error);
  TransformerConfig option = tiny("softmax");
  option.attention_options.set("window", "4");
  CHECK_THROWS_WITH_AS(generator_weights(file, path, option), doctest::Contains("window"), Error);
  option = tiny("softmax");
  option.attention_options.set("scale", "-1");
  CHECK_THROWS_WITH_AS(generator_weights(file, path, option), doctest::Contains("scale"), Error);
}
