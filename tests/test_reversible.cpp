// Reversible layers (models/reversible.h): the custom node's gradients == plain autograd through the same
// two-stream function (with dropout and reformer's per-call hashing replayed), finite differences, memory that
// does not grow with depth, step() == the parallel form, the forward == the formulas, and the refusals.
#include "models/reversible.h"

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "ops/binary.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_parameter_gradients;
using eng::test::max_abs_diff;

namespace {

TransformerConfig tiny(const std::string& attention = "softmax", double dropout = 0.0, int64_t layers = 3) {
  TransformerConfig c;
  c.vocab = 5;
  c.d_model = 4;
  c.heads = 2;
  c.d_ff = 6;
  c.decoder_layers = layers;
  c.max_len = 16;
  c.dropout = dropout;
  c.attention = attention;
  c.reversible = true;
  return c;
}

Tensor random_ids(int64_t B, int64_t L, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  Tensor ids = zeros({B, L}, DType::I64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < L; ++t) ids.set_at({b, t}, double(rng.below(uint64_t(vocab))));
  return ids;
}

// The reversible model's function with ordinary autograd (every activation kept): the reference.
Tensor two_stream_logits(LanguageModel& m, const Tensor& ids) {
  AttentionMask mask;
  mask.causal = true;
  Tensor x = reversible_stack(m.layers, m.embed.forward(ids), mask, m.rng(), false);
  return m.logits(m.final_norm->forward(x));
}

// Two training steps of the same model through the custom node and through plain autograd: equal outputs,
// parameter gradients, generator positions and buffers after each step (so the backward's recomputation drew
// the forward's masks and hashes, and left the run where the plain run is).
void check_same_as_plain(const TransformerConfig& c, const Tensor& ids) {
  LanguageModel rev(c), plain(c);
  rev.to(DType::F64);
  plain.to(DType::F64);
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    rev.zero_grad();
    plain.zero_grad();
    Tensor y = rev.forward(ids);
    Tensor yp = two_stream_logits(plain, ids);
    CHECK(max_abs_diff(y, yp) < 1e-12);
    Tensor w = eng::test::uniform(y.shape(), 99 + uint64_t(step));
    y.backward(w);
    yp.backward(w);
    auto pr = rev.named_parameters(), pp = plain.named_parameters();
    REQUIRE(pr.size() == pp.size());
    for (size_t i = 0; i < pr.size(); ++i) {
      CAPTURE(pr[i].first);
      // Only reformer's unused k_proj (shared-QK) gets no gradient, in both runs.
      REQUIRE(pr[i].second.grad().defined() == pp[i].second.grad().defined());
      if (pp[i].second.grad().defined()) CHECK(max_abs_diff(pr[i].second.grad(), pp[i].second.grad()) < 1e-10);
    }
    CHECK(rev.rng().position() == plain.rng().position());
    auto br = rev.named_buffers(), bp = plain.named_buffers();
    REQUIRE(br.size() == bp.size());
    for (size_t i = 0; i < br.size(); ++i) CHECK(max_abs_diff(br[i].second, bp[i].second) == 0);
  }
}

}  // namespace

TEST_CASE("reversible: custom-node gradients == plain autograd of the two-stream model (dropout replayed)") {
  Tensor ids = random_ids(2, 6, 5, 3);
  check_same_as_plain(tiny("softmax", 0.0), ids);
  TransformerConfig c = tiny("softmax", 0.3);
  check_same_as_plain(c, ids);
  // The masks really change from call to call, so equal gradients need the exact replay.
  LanguageModel m(c);
  m.to(DType::F64);
  NoGradGuard no_grad;
  CHECK(max_abs_diff(m.forward(ids), m.forward(ids)) > 1e-3);
}

TEST_CASE("reversible: reformer attention, whose hashes are redrawn every call, is replayed exactly") {
  TransformerConfig c = tiny("reformer", 0.1, 2);
  c.attention_options.set("buckets", "4");
  c.attention_options.set("chunk", "2");
  c.attention_options.set("rounds", "2");
  Tensor ids = random_ids(2, 16, 5, 4);
  check_same_as_plain(c, ids);
  c.dropout = 0;  // the hashes alone change the output from call to call
  LanguageModel m(c);
  m.to(DType::F64);
  NoGradGuard no_grad;
  CHECK(max_abs_diff(m.forward(ids), m.forward(ids)) > 1e-6);
  CHECK(m.named_buffers().front().first == "layers0.self_attn.attention.hash_calls");
}

GRADCHECK("reversible_stack") {
  LanguageModel m(tiny("softmax", 0.0, 2));
  m.to(DType::F64);
  Tensor ids = random_ids(2, 3, 5, 5);
  check_parameter_gradients(m.named_parameters(), [&] { return m.forward(ids); }, {1e-6, 1e-6, 1e-5});
}

TEST_CASE("reversible: forward == the formulas Y1 = X1 + F(X2), Y2 = X2 + G(Y1), out = (Y1 + Y2) / 2") {
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    LanguageModel m(tiny("softmax", 0.0, 2), causal);
    m.to(DType::F64);
    Tensor ids = random_ids(2, 5, 5, 6);
    AttentionMask mask;
    mask.causal = causal;
    mask.key_lengths = {5, 3};
    Tensor x1 = m.embed.forward(ids), x2 = x1;
    for (const auto& layer : m.layers) {
      Tensor t = layer->norm1.forward(x2);
      x1 = add(x1, layer->self_attn.forward(t, t, mask));
      x2 = add(x2, layer->ffn.forward(layer->norm2.forward(x1)));
    }
    Tensor want = m.logits(m.final_norm->forward(mul_scalar(add(x1, x2), 0.5)));
    CHECK(max_abs_diff(m.forward(ids, {5, 3}), want) < 1e-12);
    NoGradGuard no_grad;
    CHECK(max_abs_diff(m.forward(ids, {5, 3}), want) < 1e-12);
  }
  // Same parameters and names as the plain model: checkpoints are interchangeable.
  TransformerConfig plain = tiny();
  plain.reversible = false;
  auto a = LanguageModel(tiny()).named_parameters(), b = LanguageModel(plain).named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].first == b[i].first);
}

TEST_CASE("reversible: step() reproduces the parallel form at every position (softmax, causal-linear)") {
  for (const char* attention : {"softmax", "causal-linear"}) {
    CAPTURE(attention);
    LanguageModel m(tiny(attention, 0.1));
    m.to(DType::F64);
    m.eval();
    NoGradGuard no_grad;
    Tensor ids = random_ids(2, 6, 5, 7);
    Tensor full_logits = m.forward(ids);
    auto st = m.new_state();
    for (int64_t t = 0; t < 6; ++t) {
      Tensor lt = m.step(squeeze(narrow(ids, 1, t, 1), 1), st);
      CHECK(max_abs_diff(lt, squeeze(narrow(full_logits, 1, t, 1), 1)) < 1e-10);
    }
  }
}

namespace {

// Peak allocator bytes of one forward + backward, less the bytes live before it (parameters, ids) and the
// parameter gradients it creates: what the activations (and the backward's temporaries) cost.
size_t activation_peak(bool reversible, int64_t layers) {
  TransformerConfig c;
  c.vocab = 8;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.decoder_layers = layers;
  c.max_len = 64;
  c.reversible = reversible;
  LanguageModel m(c);
  Tensor ids = random_ids(2, 64, 8, 8);
  Tensor w = full({2, 64, 8}, 1.0, DType::F32);
  allocator::empty_cache();
  allocator::reset_peak();
  const size_t base = allocator::stats().live_bytes;
  m.forward(ids).backward(w);
  const size_t grads = size_t(m.num_parameters()) * sizeof(float);
  return allocator::stats().peak_bytes - base - grads;
}

}  // namespace

TEST_CASE("reversible: activation memory of forward + backward does not grow with depth") {
  const bool was = allocator::caching();
  allocator::set_caching(false);  // exact block sizes: a cached block may be up to twice the request
  const size_t rev2 = activation_peak(true, 2), rev8 = activation_peak(true, 8);
  const size_t plain2 = activation_peak(false, 2), plain8 = activation_peak(false, 8);
  allocator::set_caching(was);
  INFO("activation peak bytes: reversible 2 layers ", rev2, ", 8 layers ", rev8, "; plain 2 layers ", plain2,
          ", 8 layers ", plain8);
  CHECK(double(rev8) < 1.15 * double(rev2));
  CHECK(double(plain8) > 2.5 * double(plain2));
  CHECK(double(rev8) * 2 < double(plain8));
}

TEST_CASE("reversible: config key, and clear refusals (post-norm, encoder-decoder)") {
  TransformerConfig c = tiny();
  auto m = c.to_map();
  CHECK(m.at("reversible") == "true");
  CHECK(TransformerConfig::from_map(m).reversible);
  m.erase("reversible");  // checkpoints written before the key existed
  CHECK_FALSE(TransformerConfig::from_map(m).reversible);
  CHECK(c.to_map().size() == m.size() + 1);
  c.reversible = false;
  CHECK(c.to_map() == m);
  m["reversible"] = "yes";
  CHECK_THROWS_WITH(TransformerConfig::from_map(m), "config: reversible must be true or false, got 'yes'");

  TransformerConfig post = tiny();
  post.pre_norm = false;
  CHECK_THROWS_WITH(LanguageModel{post}, "config: reversible layers need pre-norm (norm=pre); post-norm's norm "
                                         "after the residual add cannot be inverted");
  TransformerConfig seq = tiny();
  seq.encoder_layers = 1;
  seq.decoder_layers = 1;
  CHECK_THROWS_WITH(EncoderDecoder{seq}, "config: reversible layers are for decoder-only and encoder-only models, "
                                         "not encoder-decoder (encoder_layers 1, decoder_layers 1)");
}
