// The encoder over continuous inputs (models/frame_encoder.h): shapes, padding invariance under several
// attention variants, the pooled head against a mean computed by hand, and finite-difference gradients.
#include "models/frame_encoder.h"

#include "engine/autograd.h"
#include "ops/index.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_parameter_gradients;
using eng::test::max_abs_diff;

namespace {

constexpr int64_t kFeatures = 3;

TransformerConfig tiny(const std::string& attention = "softmax", PositionalKind pos = PositionalKind::Sinusoidal) {
  TransformerConfig c;
  c.vocab = 5;  // the classes
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 12;
  c.encoder_layers = 2;
  c.decoder_layers = 0;
  c.max_len = 8;
  c.attention = attention;
  c.positional = pos;
  return c;
}

// Two sequences of T = 6 frames: row 0 valid to 4, row 1 to 6. `pad` fills row 0's frames 4 and 5.
Tensor frames(double pad) {
  Tensor x = eng::test::uniform({2, 6, kFeatures}, 7);
  for (int64_t t = 4; t < 6; ++t)
    for (int64_t f = 0; f < kFeatures; ++f) x.set_at({0, t, f}, pad * double(t + f + 1));
  return x;
}

}  // namespace

TEST_CASE("frame encoder: shapes, parameter names and errors") {
  FrameEncoder m(tiny("softmax", PositionalKind::Learned), kFeatures);
  m.to(DType::F64);
  Tensor x = frames(0);
  CHECK(m.features(x, {4, 6}).shape() == Shape{2, 6, 8});
  CHECK(m.forward(x, {4, 6}).shape() == Shape{2, 6, 5});
  CHECK(m.forward_pooled(x, {4, 6}).shape() == Shape{2, 5});
  CHECK(m.forward(x).shape() == Shape{2, 6, 5});
  auto named = m.named_parameters();
  CHECK(named.front().first == "input.weight");
  CHECK(named[2].first == "positions.weight");
  CHECK(named[3].first == "layers0.self_attn.q_proj.weight");
  CHECK(named.back().first == "head.bias");
  CHECK_THROWS_WITH(m.forward(zeros({2, 6, 4}, DType::F64)),
                    "FrameEncoder: frames must be float [B, T, 3], got f64 [2, 6, 4]");
  CHECK_THROWS_WITH(m.forward(zeros({1, 9, 3}, DType::F64)), "FrameEncoder: 9 frames, the model takes 1 to max_len 8");
  CHECK_THROWS_WITH(m.forward(x, {4, 7}), "FrameEncoder: lengths[1] = 7 is outside [1, 6]");
  CHECK_THROWS_WITH(m.forward_pooled(x, {0, 6}), "FrameEncoder: lengths[0] = 0 is outside [1, 6]");
  CHECK_THROWS_WITH(m.forward(x, {4}), "FrameEncoder: 1 lengths for frames [2, 6, 3]");
  TransformerConfig lm = tiny();
  lm.decoder_layers = 1;
  CHECK_THROWS_WITH(FrameEncoder(lm, kFeatures),
                    "FrameEncoder: needs encoder_layers >= 1 and decoder_layers 0, got 2 and 1");
}

TEST_CASE("frame encoder: padding frames do not change the valid outputs") {
  for (const char* attention : {"softmax", "linear", "aft-simple", "performer", "efficient"}) {
    CAPTURE(attention);
    FrameEncoder m(tiny(attention), kFeatures);
    m.to(DType::F64);
    m.eval();
    NoGradGuard no_grad;
    // One batch holding the same valid frames twice (rows 0 and 2) with different padding, so that variants
    // with random features (performer) see the same draw; row 1 is a full-length neighbour.
    Tensor a = frames(0), b = frames(1e3);
    Tensor x = concat({a, narrow(b, 0, 0, 1)}, 0);
    Tensor y = m.forward(x, {4, 6, 4});
    CHECK(max_abs_diff(narrow(narrow(y, 0, 0, 1), 1, 0, 4), narrow(narrow(y, 0, 2, 1), 1, 0, 4)) < 1e-10);
    Tensor p = m.forward_pooled(x, {4, 6, 4});
    CHECK(max_abs_diff(narrow(p, 0, 0, 1), narrow(p, 0, 2, 1)) < 1e-10);
    // And the padded row equals the sequence run alone, unpadded.
    if (std::string(attention) != "performer") {
      Tensor alone = m.forward(narrow(narrow(a, 0, 0, 1), 1, 0, 4));
      CHECK(max_abs_diff(narrow(narrow(y, 0, 0, 1), 1, 0, 4), alone) < 1e-10);
    }
  }
}

TEST_CASE("frame encoder: the pooled logits are the head of the mean of the valid features") {
  for (bool pre_norm : {true, false}) {
    TransformerConfig c = tiny("linear");
    c.pre_norm = pre_norm;
    FrameEncoder m(c, kFeatures);
    m.to(DType::F64);
    m.eval();
    NoGradGuard no_grad;
    const Tensor x = frames(5);
    const std::vector<int64_t> lengths{4, 6};
    const Tensor z = m.features(x, lengths).contiguous();
    const Tensor w = m.head.weight.contiguous(), bias = m.head.bias.contiguous();
    const Tensor pooled = m.forward_pooled(x, lengths);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t k = 0; k < 5; ++k) {
        double want = bias.at({k});
        for (int64_t d = 0; d < 8; ++d) {
          double mean = 0;
          for (int64_t t = 0; t < lengths[size_t(b)]; ++t) mean += z.at({b, t, d});
          want += w.at({k, d}) * mean / double(lengths[size_t(b)]);
        }
        CHECK(pooled.at({b, k}) == doctest::Approx(want).epsilon(1e-12));
      }
  }
}

TEST_CASE("frame encoder: gradient of every parameter, per frame and pooled, with padding") {
  const Tensor x = frames(2);
  for (PositionalKind pos : {PositionalKind::Sinusoidal, PositionalKind::Learned, PositionalKind::Rotary}) {
    CAPTURE(positional_name(pos));
    TransformerConfig c = tiny("softmax", pos);
    c.d_model = 4;
    c.d_ff = 6;
    c.encoder_layers = 1;
    c.reversible = pos == PositionalKind::Rotary;
    FrameEncoder m(c, kFeatures);
    m.to(DType::F64);
    check_parameter_gradients(m.named_parameters(), [&] { return m.forward_pooled(x, {4, 6}); },
                              {1e-6, 1e-6, 1e-5});
    if (pos == PositionalKind::Sinusoidal)
      check_parameter_gradients(m.named_parameters(), [&] { return m.forward(x, {4, 6}); }, {1e-6, 1e-6, 1e-5});
  }
}
