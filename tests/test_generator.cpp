// Generator (models/generator.h) against LanguageModel::step, its reference: the same logits at every position
// to f32 rounding, for each kind of model it runs; and, counted by the replaced operator new (tools/heap_count.h,
// defined for the whole test binary here) and the engine allocator's stats, not one allocation per token.
#include "models/generator.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "models/quantized.h"
#include "tools/heap_count.h"

using namespace eng;

namespace {

TransformerConfig tiny(const std::string& attention) {
  TransformerConfig c;
  c.vocab = 13;
  c.d_model = 16;
  c.heads = 4;
  c.d_ff = 24;
  c.decoder_layers = 2;
  c.max_len = 12;
  c.attention = attention;
  return c;
}

const std::vector<int64_t> kIds = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};

// Feeds kIds to both; every logit within 2e-5 of the reference's, relative to the row's largest. With `quant`, the
// model's Linear weights and token table are quantized first (both paths then run the same quantized products).
void check_against_step(const TransformerConfig& c, const QuantFormat* quant = nullptr) {
  LanguageModel model(c);
  model.eval();
  if (quant) REQUIRE(!quantize_model(model, *quant).empty());
  NoGradGuard no_grad;
  LanguageModel::State state = model.new_state();
  Generator gen(model);
  for (size_t t = 0; t < kIds.size(); ++t) {
    const std::vector<double> ref =
        model.step(from_vector(std::vector<double>{double(kIds[t])}, {1}, DType::I64), state).to_vector();
    const float* out = gen.step(kIds[t]);
    REQUIRE(int64_t(ref.size()) == gen.outputs());
    double scale = 1, worst = 0;
    for (double r : ref) scale = std::max(scale, std::fabs(r));
    for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(double(out[i]) - ref[i]));
    CAPTURE(t);
    CHECK(worst <= 2e-5 * scale);
  }
  CHECK(gen.length() == int64_t(kIds.size()));
}

// Heap allocations (operator new) and engine allocator blocks over `steps` calls of `step`.
template <class F>
std::pair<uint64_t, uint64_t> allocations(int steps, F step) {
  const uint64_t blocks = allocator::stats().allocs;
  heap_count::Scope scope;
  for (int i = 0; i < steps; ++i) step(i);
  return {scope.allocations(), allocator::stats().allocs - blocks};
}

}  // namespace

TEST_CASE("generator: the logits of LanguageModel::step at every position") {
  SUBCASE("softmax, pre-norm, layer norm, sinusoidal, gelu") { check_against_step(tiny("softmax")); }
  SUBCASE("softmax, post-norm, rms norm, learned positions, relu, one K/V head") {
    TransformerConfig c = tiny("softmax");
    c.pre_norm = false;
    c.rms_norm = true;
    c.positional = PositionalKind::Learned;
    c.activation = Activation::Relu;
    c.kv_heads = 1;
    check_against_step(c);
  }
  SUBCASE("softmax, two K/V groups, no positions, gelu-tanh, scale option") {
    TransformerConfig c = tiny("softmax");
    c.kv_heads = 2;
    c.positional = PositionalKind::None;
    c.activation = Activation::GeluTanh;
    c.attention_options.set("scale", "0.3");
    check_against_step(c);
  }
  SUBCASE("GPT-2's form: tied head, embedding scale 1, learned positions, gelu-tanh") {
    TransformerConfig c = tiny("softmax");
    c.tie_embeddings = true;
    c.embed_scale = 1.0;
    c.positional = PositionalKind::Learned;
    c.activation = Activation::GeluTanh;
    check_against_step(c);
  }
  SUBCASE("LLaMA's feed-forward: swiglu without biases, rms norm eps 1e-6; and geglu") {
    TransformerConfig c = tiny("softmax");
    c.activation = Activation::SwiGLU;
    c.bias = false;
    c.rms_norm = true;
    c.norm_eps = 1e-6;
    c.kv_heads = 2;
    check_against_step(c);
    c.activation = Activation::GeGLU;
    check_against_step(c);
  }
  SUBCASE("quantized weights: q8_0 and q4_0, softmax with a tied head and causal-linear") {
    for (QuantFormat f : {QuantFormat::Q8_0, QuantFormat::Q4_0}) {
      CAPTURE(quant_format_name(f));
      TransformerConfig c = tiny("softmax");
      c.d_model = 32;  // a multiple of the 32-weight blocks
      c.d_ff = 64;
      c.tie_embeddings = true;
      check_against_step(c, &f);
      c.attention = "causal-linear";
      c.tie_embeddings = false;
      check_against_step(c, &f);
    }
  }
  SUBCASE("causal-linear, elu+1") { check_against_step(tiny("causal-linear")); }
  SUBCASE("causal-linear, relu features, two K/V groups, rms norm") {
    TransformerConfig c = tiny("causal-linear");
    c.attention_options.set("feature_map", "relu");
    c.kv_heads = 2;
    c.rms_norm = true;
    check_against_step(c);
  }
}

TEST_CASE("generator: no allocation per token, for a KV cache and an RNN state, f32 and quantized") {
  for (const char* attention : {"softmax", "causal-linear", "softmax q8_0"}) {
    CAPTURE(attention);
    const bool quantized = std::string(attention) == "softmax q8_0";
    TransformerConfig c = tiny(quantized ? "softmax" : attention);
    if (quantized) c.d_model = 32, c.d_ff = 64;
    LanguageModel model(c);
    model.eval();
    if (quantized) REQUIRE(!quantize_model(model, QuantFormat::Q8_0).empty());
    NoGradGuard no_grad;
    Generator gen(model);
    gen.step(kIds[0]);
    const auto [heap, blocks] = allocations(int(kIds.size()) - 1, [&](int i) { gen.step(kIds[size_t(i) + 1]); });
    CHECK(heap == 0);
    CHECK(blocks == 0);
    // The counters see what the Tensor path allocates: the same tokens through LanguageModel::step.
    LanguageModel::State state = model.new_state();
    const Tensor first = from_vector(std::vector<double>{double(kIds[0])}, {1}, DType::I64);
    model.step(first, state);
    const auto [step_heap, step_blocks] = allocations(3, [&](int) { model.step(first, state); });
    CHECK(step_heap > 0);
    CHECK(step_blocks > 0);
  }
}

TEST_CASE("generator: refuses what it does not run, and a token outside the vocabulary") {
  TransformerConfig c = tiny("softmax");
  c.positional = PositionalKind::Rotary;
  LanguageModel rotary(c);
  CHECK(Generator::unsupported(rotary) == "positions other than none, sinusoidal and learned");
  CHECK_THROWS_WITH_AS(Generator{rotary},
                       "Generator: the model has positions other than none, sinusoidal and learned; "
                       "LanguageModel::step runs it",
                       Error);
  LanguageModel performer(tiny("performer"));
  CHECK(Generator::unsupported(performer) == "attention 'performer' (softmax, causal-linear and linear only)");
  LanguageModel model(tiny("softmax"));
  Generator gen(model);
  CHECK_THROWS_WITH_AS(gen.step(13), "Generator::step: token id 13 is outside the vocabulary of 13", Error);
  for (int64_t t = 0; t < 12; ++t) gen.step(1);
  CHECK_THROWS_WITH_AS(gen.step(1), "Generator::step: position 12 is past the model's max_len of 12", Error);
  gen.reset();
  CHECK(gen.length() == 0);
}
