// Whole models: end-to-end gradient checks, generation == parallel forward, config round trip.
#include "models/transformer.h"

#include "engine/autograd.h"
#include "ops/matmul.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_parameter_gradients;

namespace {

TransformerConfig tiny(PositionalKind pos, bool pre_norm = true) {
  TransformerConfig c;
  c.vocab = 5;
  c.d_model = 4;
  c.heads = 2;
  c.d_ff = 6;
  c.decoder_layers = 2;
  c.max_len = 16;
  c.positional = pos;
  c.pre_norm = pre_norm;
  return c;
}

Tensor ids(std::vector<double> v, Shape s) { return from_vector(v, s, DType::I64); }

}  // namespace

TEST_CASE("decoder-only model: gradient of every parameter, pre- and post-norm") {
  for (bool pre : {true, false}) {
    LanguageModel m(tiny(PositionalKind::Learned, pre));
    m.to(DType::F64);
    Tensor x = ids({1, 4, 2, 0, 3, 3}, {2, 3});
    check_parameter_gradients(m.named_parameters(), [&] { return m.forward(x); }, {1e-6, 1e-6, 1e-5});
  }
}

TEST_CASE("encoder-decoder: gradient of every parameter, with source padding") {
  TransformerConfig c = tiny(PositionalKind::Sinusoidal);
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  EncoderDecoder m(c);
  m.to(DType::F64);
  Tensor src = ids({1, 2, 3, 4, 1, 0}, {2, 3});
  Tensor tgt = ids({1, 3, 2, 4}, {2, 2});
  check_parameter_gradients(m.named_parameters(), [&] { return m.forward(src, tgt, {3, 2}); }, {1e-6, 1e-6, 1e-5});
}

TEST_CASE("parameter names are stable checkpoint keys") {
  LanguageModel m(tiny(PositionalKind::Learned));
  auto named = m.named_parameters();
  CHECK(named.front().first == "embed.tokens.weight");
  CHECK(named[1].first == "embed.positions.weight");
  CHECK(named[2].first == "layers0.self_attn.q_proj.weight");
  CHECK(named.back().first == "head.bias");
}

TEST_CASE("generation: step() reproduces the causal forward at every position") {
  for (PositionalKind pos : {PositionalKind::Sinusoidal, PositionalKind::Learned, PositionalKind::Rotary,
                             PositionalKind::Alibi}) {
    CAPTURE(positional_name(pos));
    LanguageModel m(tiny(pos));
    m.to(DType::F64);
    m.eval();
    NoGradGuard no_grad;
    Tensor x = ids({1, 4, 2, 0, 3, 3, 2, 1, 0, 4, 4, 1}, {2, 6});
    Tensor full_logits = m.forward(x);
    auto st = m.new_state();
    for (int64_t t = 0; t < 6; ++t) {
      Tensor lt = m.step(squeeze(narrow(x, 1, t, 1), 1), st);
      CHECK(eng::test::max_abs_diff(lt, squeeze(narrow(full_logits, 1, t, 1), 1)) < 1e-10);
    }
  }
}

TEST_CASE("encoder-decoder: greedy decoding with the cache equals re-running the decoder") {
  TransformerConfig c = tiny(PositionalKind::Rotary);
  c.encoder_layers = 1;
  c.decoder_layers = 2;
  EncoderDecoder m(c);
  m.to(DType::F64);
  m.eval();
  Tensor src = ids({1, 2, 3, 4, 4, 0}, {2, 3});
  Tensor out = m.greedy_decode(src, 1, 4, {3, 2});
  NoGradGuard no_grad;
  Tensor memory = m.encode(src, {3, 2});
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<double> prefix = {1};
    for (int64_t t = 0; t < 4; ++t) {
      Tensor tin = from_vector(prefix, {1, int64_t(prefix.size())}, DType::I64);
      Tensor logits = m.decode(tin, narrow(memory, 0, b, 1), {b == 0 ? 3 : 2});
      int64_t best = 0;
      for (int64_t v = 1; v < c.vocab; ++v)
        if (logits.at({0, t, v}) > logits.at({0, t, best})) best = v;
      CHECK(out.at({b, t}) == best);
      prefix.push_back(double(out.at({b, t})));
    }
  }
}

TEST_CASE("an output head wider than the vocabulary (outputs): forward and step give outputs values per position") {
  TransformerConfig c = tiny(PositionalKind::Learned);
  c.outputs = 9;  // e.g. the 3K parameters of a mixture of K = 3 logistics
  CHECK(TransformerConfig::from_map(c.to_map()).outputs == 9);
  LanguageModel m(c);
  m.to(DType::F64);
  m.eval();
  NoGradGuard no_grad;
  Tensor x = ids({1, 4, 2, 0, 3, 3}, {2, 3});
  Tensor full = m.forward(x);
  CHECK(full.shape() == Shape{2, 3, 9});
  auto st = m.new_state();
  for (int64_t t = 0; t < 3; ++t) {
    Tensor lt = m.step(squeeze(narrow(x, 1, t, 1), 1), st);
    CHECK(lt.shape() == Shape{2, 9});
    CHECK(eng::test::max_abs_diff(lt, squeeze(narrow(full, 1, t, 1), 1)) < 1e-10);
  }
  c.outputs = -1;
  CHECK_THROWS_WITH(c.validate(), "config: outputs must be >= 0 (0 = vocab), got -1");
}

TEST_CASE("config: round trip through metadata, clear errors") {
  TransformerConfig c = tiny(PositionalKind::Alibi, false);
  c.attention_options.set("impl", "naive");
  c.dropout = 0.1;
  TransformerConfig d = TransformerConfig::from_map(c.to_map());
  CHECK(d.to_map() == c.to_map());
  auto m = c.to_map();
  m["heads"] = "3";
  CHECK_THROWS_WITH(TransformerConfig::from_map(m), "config: d_model 4 is not divisible by heads 3");
  m = c.to_map();
  m["colour"] = "blue";
  CHECK_THROWS_WITH(TransformerConfig::from_map(m), "config: unknown key 'colour'");
  m = c.to_map();
  m["d_model"] = "big";
  CHECK_THROWS_WITH(TransformerConfig::from_map(m), "config: d_model expects an integer, got 'big'");
  m = c.to_map();
  m["dropout"] = "nan";
  CHECK_THROWS_WITH(TransformerConfig::from_map(m), "config: dropout expects a finite number, got 'nan'");
  m = c.to_map();
  m["max_len"] = "99999999999999999999";
  CHECK_THROWS_WITH(TransformerConfig::from_map(m), "config: max_len expects an integer, got '99999999999999999999'");
  for (const char* key : {"encoder_layers", "positional"}) {  // never std::out_of_range, nor a default model
    m = c.to_map();
    m.erase(key);
    CHECK_THROWS_WITH(TransformerConfig::from_map(m), (std::string("config: the required key '") + key +
                                                       "' is missing").c_str());
  }
  TransformerConfig e = tiny(PositionalKind::None);
  e.attention = "nonexistent";
  CHECK_THROWS_WITH(LanguageModel{e}, doctest::Contains("attention: unknown variant 'nonexistent'"));
  TransformerConfig f = tiny(PositionalKind::None);
  f.attention_options.set("colour", "blue");
  CHECK_THROWS_WITH(LanguageModel{f}, "attention 'softmax': unknown option 'colour'");
}

// The architecture options of GPT-2 / LLaMA (tie_embeddings, bias, embed_scale, rope_theta, rope_pairing, norm_eps):
// written only when set, read back, and acting on the model as their definition says.
TEST_CASE("config: architecture options round trip, change the model, and are absent from a default config") {
  TransformerConfig base = tiny(PositionalKind::Rotary);
  for (const char* key : {"bias", "tie_embeddings", "embed_scale", "rope_theta", "rope_pairing", "norm_eps"})
    CHECK(base.to_map().count(key) == 0);  // old checkpoints lack them and load as today's model
  TransformerConfig c = base;
  c.bias = false;
  c.tie_embeddings = true;
  c.embed_scale = 1;
  c.rope_theta = 500000;
  c.rope_pairing = RopePairing::Interleaved;
  c.norm_eps = 1e-6;
  c.rms_norm = true;
  c.activation = Activation::SwiGLU;
  c.kv_heads = 1;
  const auto m = c.to_map();
  CHECK(m.at("bias") == "false");
  CHECK(m.at("tie_embeddings") == "true");
  CHECK(m.at("rope_pairing") == "interleaved");
  CHECK(m.at("activation") == "swiglu");
  CHECK(TransformerConfig::from_map(m).to_map() == m);
  LanguageModel lm(c);
  CHECK(lm.head == nullptr);
  for (const auto& [name, p] : lm.named_parameters()) CHECK(name.find("bias") == std::string::npos);
  lm.to(DType::F64);
  lm.eval();
  Tensor x = ids({1, 4, 2, 0, 3, 3}, {1, 6});
  check_parameter_gradients(lm.named_parameters(), [&] { return lm.forward(x); }, {1e-6, 1e-6, 1e-5});
  NoGradGuard no_grad;
  const Tensor full_logits = lm.forward(x);
  auto st = lm.new_state();
  for (int64_t t = 0; t < 6; ++t)
    CHECK(eng::test::max_abs_diff(lm.step(squeeze(narrow(x, 1, t, 1), 1), st),
                                  squeeze(narrow(full_logits, 1, t, 1), 1)) < 1e-10);
  // Tied head: logits are the final hidden states against the embedding rows.
  AttentionMask causal;
  causal.causal = true;
  const Tensor hidden =
      lm.final_norm->forward(lm.layers[1]->forward(lm.layers[0]->forward(lm.embed.forward(x), causal), causal));
  CHECK(eng::test::max_abs_diff(full_logits, matmul(hidden, transpose(lm.embed.tokens.weight, 0, 1))) < 1e-12);
  // embed_scale multiplies the token embeddings: 1 keeps them as they are, 0 means sqrt(d_model).
  CHECK(eng::test::max_abs_diff(lm.embed.forward(x), lm.embed.tokens.forward(x)) == 0);

  auto bad = [&](const char* key, const char* value) {
    auto b = c.to_map();
    b[key] = value;
    return TransformerConfig::from_map(b);
  };
  CHECK_THROWS_WITH(bad("rope_pairing", "zigzag"), "rope: pairing must be rotate-half or interleaved, got 'zigzag'");
  CHECK_THROWS_WITH(bad("bias", "yes"), "config: bias must be true or false, got 'yes'");
  CHECK_THROWS_WITH(bad("rope_theta", "-1"), "config: rope_theta must be positive, got -1");
  CHECK_THROWS_WITH(bad("norm_eps", "2"), "config: norm_eps must be in [0, 1) (0 = the norm's default), got 2");
  CHECK_THROWS_WITH(bad("outputs", "30"), "config: tie_embeddings needs a decoder-only or encoder-only model whose "
                    "head outputs the vocabulary (outputs 30, encoder_layers 0, decoder_layers 2)");
}

TEST_CASE("config: norm_eps reaches the norms; rope_theta and rope_pairing reach the attention") {
  TransformerConfig c = tiny(PositionalKind::Rotary);
  c.d_model = 8;  // head dim 4: two rotary pairs, so the pairing matters
  Tensor x = ids({1, 4, 2, 0, 3}, {1, 5});
  NoGradGuard no_grad;
  auto logits = [&](const TransformerConfig& cfg) { return LanguageModel(cfg).forward(x); };
  const Tensor plain = logits(c);
  TransformerConfig d = c;
  d.rope_theta = 10;
  CHECK(eng::test::max_abs_diff(logits(d), plain) > 1e-4);
  d = c;
  d.rope_pairing = RopePairing::Interleaved;
  CHECK(eng::test::max_abs_diff(logits(d), plain) > 1e-4);
  d = c;
  d.norm_eps = 1e-5;  // LayerNorm's default: the same model
  CHECK(eng::test::max_abs_diff(logits(d), plain) == 0);
  d.norm_eps = 0.5;
  CHECK(eng::test::max_abs_diff(logits(d), plain) > 1e-4);
}

TEST_CASE("token embedding: sequences longer than max_len are refused") {
  LanguageModel m(tiny(PositionalKind::Sinusoidal));
  CHECK_THROWS_WITH(m.forward(zeros({1, 17}, DType::I64)), "embedding: positions up to 17 exceed max_len 16");
}
