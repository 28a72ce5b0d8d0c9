// Modules: named parameters, values, and gradients of every parameter by finite differences.
#include <cmath>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "models/embedding.h"
#include "models/feed_forward.h"
#include "models/linear.h"
#include "models/multihead.h"
#include "models/norm_layers.h"
#include "models/positional.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_parameter_gradients;
using eng::test::uniform;

TEST_CASE("linear: y = x W^T + b, named parameters, gradients") {
  Rng rng(1);
  Linear lin(3, 2, rng);
  auto named = lin.named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  CHECK(named[0].second.shape() == Shape{2, 3});
  CHECK(named[1].first == "bias");
  for (double w : lin.weight.to_vector()) CHECK(std::abs(w) <= 1 / std::sqrt(3.0));
  lin.to(DType::F64);
  Tensor x = uniform({4, 3}, 2);
  Tensor y = lin.forward(x);
  Tensor ref = add(matmul(x, transpose(lin.weight.detach())), lin.bias.detach());
  CHECK(eng::test::max_abs_diff(y, ref) < 1e-12);
  check_parameter_gradients(lin.named_parameters(), [&] { return lin.forward(x); });
  CHECK_THROWS_WITH(lin.forward(zeros({2, 4}, DType::F64)), "Linear: input of shape [2, 4] does not end in in_features 3");
}

TEST_CASE("embedding, layer norm and rms norm modules: gradients of their parameters") {
  Rng rng(3);
  Embedding emb(5, 4, rng);
  LayerNorm ln(4);
  RMSNorm rms(4);
  emb.to(DType::F64);
  ln.to(DType::F64);
  rms.to(DType::F64);
  Tensor ids = from_vector(std::vector<double>{0, 3, 3, 1}, {2, 2}, DType::I64);
  check_parameter_gradients(emb.named_parameters(), [&] { return emb.forward(ids); });
  {
    NoGradGuard g;  // non-trivial weights so that the check is not at a special point
    ln.weight.copy_from(uniform({4}, 4, 0.5, 1.5));
    ln.bias.copy_from(uniform({4}, 5));
    rms.weight.copy_from(uniform({4}, 6, 0.5, 1.5));
  }
  Tensor x = uniform({3, 4}, 7);
  auto ps = ln.named_parameters();
  check_parameter_gradients(ps, [&] { return ln.forward(x); });
  check_parameter_gradients(rms.named_parameters(), [&] { return rms.forward(x); });
}

TEST_CASE("feed-forward: gradients; chunked evaluation gives the same result with less memory") {
  Rng rng(5);
  FeedForward ffn(4, 16, Activation::Gelu, 0.0, rng);
  ffn.to(DType::F64);
  Tensor x = uniform({2, 3, 4}, 8);
  check_parameter_gradients(ffn.named_parameters(), [&] { return ffn.forward(x); });

  FeedForward big(64, 1024, Activation::Relu, 0.0, rng);
  Tensor xb = uniform({1, 512, 64}, 9).to(DType::F32);
  NoGradGuard no_grad;
  bool was = allocator::caching();
  allocator::set_caching(true);
  allocator::reset_peak();
  size_t base = allocator::stats().live_bytes;
  Tensor whole = big.forward(xb);
  size_t peak_whole = allocator::stats().peak_bytes - base;
  big.set_chunk(64);
  allocator::reset_peak();
  base = allocator::stats().live_bytes;
  Tensor chunked = big.forward(xb);
  size_t peak_chunked = allocator::stats().peak_bytes - base;
  allocator::set_caching(was);
  CHECK(eng::test::max_abs_diff(whole, chunked) == 0);
  CHECK(peak_chunked * 3 < peak_whole);  // the [512, 1024] hidden activation is held 64 rows at a time
}

// Reference: the gated forms written out with plain ops, w2(act(w1 x + b1) ⊙ (w3 x + b3)) + b2 (Shazeer 2020).
TEST_CASE("feed-forward: swiglu and geglu against their formulas, gradients, no biases when built without") {
  for (Activation act : {Activation::SwiGLU, Activation::GeGLU}) {
    CAPTURE(activation_name(act));
    Rng rng(6);
    FeedForward ffn(4, 6, act, 0.0, rng);
    ffn.to(DType::F64);
    REQUIRE(ffn.fc3 != nullptr);
    Tensor x = uniform({2, 3, 4}, 10);
    auto affine = [&](const Linear& l) { return add(matmul(x, transpose(l.weight, 0, 1)), l.bias); };
    const Tensor h = affine(ffn.fc1);
    const Tensor a = act == Activation::SwiGLU ? mul(h, sigmoid(h)) : gelu(h, GeluForm::Erf);
    const Tensor want = add(matmul(mul(a, affine(*ffn.fc3)), transpose(ffn.fc2.weight, 0, 1)), ffn.fc2.bias);
    CHECK(eng::test::max_abs_diff(ffn.forward(x), want) < 1e-12);
    check_parameter_gradients(ffn.named_parameters(), [&] { return ffn.forward(x); });
  }
  Rng rng(7);
  FeedForward plain(4, 6, Activation::SwiGLU, 0.0, rng, false);
  std::vector<std::string> names;
  for (const auto& [name, p] : plain.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"fc1.weight", "fc2.weight", "fc3.weight"});
  CHECK_THROWS_WITH(parse_activation("swish"),
                    "activation: expected relu, gelu, gelu-tanh, swiglu or geglu, got 'swish'");
}

TEST_CASE("multi-head attention: gradients of every projection, self and cross, with rotary and alibi") {
  for (PositionalKind pos : {PositionalKind::None, PositionalKind::Rotary, PositionalKind::Alibi}) {
    Rng rng(11);
    MultiHeadConfig c;
    c.d_model = 4;
    c.heads = 2;
    c.causal = true;
    c.positional = pos;
    MultiHeadAttention mha(c, rng);
    mha.to(DType::F64);
    Tensor x = uniform({2, 3, 4}, 12);
    Tensor mem = uniform({2, 5, 4}, 13);
    AttentionMask causal;
    causal.causal = true;
    check_parameter_gradients(mha.named_parameters(), [&] { return mha.forward(x, x, causal); });
    AttentionMask pad;
    pad.key_lengths = {5, 2};
    check_parameter_gradients(mha.named_parameters(), [&] { return mha.forward(x, mem, pad); });
  }
}

TEST_CASE("multi-head attention: d_model not divisible by heads is refused") {
  Rng rng(1);
  MultiHeadConfig c;
  c.d_model = 10;
  c.heads = 3;
  CHECK_THROWS_WITH(MultiHeadAttention(c, rng), "MultiHeadAttention: d_model 10 is not divisible by heads 3");
}

TEST_CASE("positional encodings: sinusoidal values, alibi slopes, learned table bounds") {
  Tensor t = sinusoidal_table(3, 4, 5, DType::F64);
  CHECK(t.at({1, 0}) == doctest::Approx(std::sin(6.0)));
  CHECK(t.at({1, 1}) == doctest::Approx(std::cos(6.0)));
  CHECK(t.at({2, 2}) == doctest::Approx(std::sin(7.0 / 100.0)));
  CHECK(t.at({2, 3}) == doctest::Approx(std::cos(7.0 / 100.0)));
  Tensor s8 = alibi_slopes(8);
  for (int64_t h = 0; h < 8; ++h) CHECK(s8.at({h}) == doctest::Approx(std::pow(2.0, -double(h + 1))));
  Tensor s6 = alibi_slopes(6);  // 4 slopes of n=4, then slopes 1 and 3 (0-based 0, 2) of n=8
  std::vector<double> want = {std::pow(2.0, -2), std::pow(2.0, -4), std::pow(2.0, -6), std::pow(2.0, -8),
                              std::pow(2.0, -1), std::pow(2.0, -3)};
  for (int64_t h = 0; h < 6; ++h) CHECK(s6.at({h}) == doctest::Approx(want[size_t(h)]));
  Rng rng(2);
  LearnedPositional lp(8, 4, rng);
  CHECK(lp.forward(3, 5).shape() == Shape{3, 4});
  CHECK_THROWS_WITH(lp.forward(3, 6), "learned positional encoding: positions 6..8 exceed max_len 8");
  CHECK_THROWS_WITH(parse_positional("xl"),
                    "positional encoding: expected none, sinusoidal, learned, rotary, alibi or relative, got 'xl'");
}
