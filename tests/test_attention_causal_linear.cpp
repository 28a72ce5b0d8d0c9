// `causal-linear`: the custom backward (Algorithm 1) against autograd through the naive cumulative-sum
// version and finite differences; the RNN form against the parallel form in a whole model; stability at
// N = 65536.
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "models/attention/linear.h"
#include "models/transformer.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/cumsum.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::uniform;

namespace {

std::unique_ptr<Attention> causal_linear() { return make_attention("causal-linear", AttentionConfig{}); }

// What a user writes without a custom kernel: S_i = cumsum_j φ(k_j) v_jᵀ materialised as [B, H, N, M, Dv].
Tensor cumsum_form(const Tensor& q, const Tensor& k, const Tensor& v) {
  Tensor fq = add_scalar(elu(q), 1.0), fk = add_scalar(elu(k), 1.0);
  Tensor S = cumsum(mul(unsqueeze(fk, -1), unsqueeze(v, -2)), 2);  // [B, H, N, M, Dv]
  Tensor Z = cumsum(fk, 2);                                       // [B, H, N, M]
  Tensor num = sum(mul(unsqueeze(fq, -1), S), {3});               // [B, H, N, Dv]
  Tensor den = add_scalar(sum(mul(fq, Z), {3}, true), 1e-6);
  return div(num, den);
}

}  // namespace

TEST_CASE("causal-linear: custom backward == autograd through the cumulative-sum version") {
  auto attn = causal_linear();
  std::vector<Tensor> x = {uniform({2, 2, 100, 4}, 1, -2, 2), uniform({2, 2, 100, 4}, 2, -2, 2),
                           uniform({2, 2, 100, 3}, 3)};
  Tensor w = uniform({2, 2, 100, 3}, 4);
  std::vector<Tensor> got, want;
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<Tensor> l;
    for (const Tensor& t : x) l.push_back(t.clone().detach().set_requires_grad(true));
    Tensor y = pass == 0 ? attn->forward(l[0], l[1], l[2], AttentionMask{}) : cumsum_form(l[0], l[1], l[2]);
    sum(mul(y, w)).backward();
    (pass == 0 ? got : want) = {y.detach(), l[0].grad(), l[1].grad(), l[2].grad()};
  }
  for (size_t i = 0; i < got.size(); ++i) CHECK(eng::test::allclose(got[i], want[i], 1e-10, 1e-12));
}

TEST_CASE("causal-linear: finite differences through the variant, and causal whatever the mask says") {
  auto attn = causal_linear();
  eng::test::check_gradients(
      [&](const std::vector<Tensor>& x) { return attn->forward(x[0], x[1], x[2], AttentionMask{}); },
      {uniform({1, 2, 5, 3}, 1), uniform({1, 2, 5, 3}, 2), uniform({1, 2, 5, 2}, 3)});
  Tensor q = uniform({1, 1, 6, 3}, 1), k = uniform({1, 1, 6, 3}, 2), v = uniform({1, 1, 6, 2}, 3);
  Tensor y = attn->forward(q, k, v, AttentionMask{});
  Tensor v2 = v.clone();
  v2.data<double>()[5 * 2] = 1e6;  // the last position's value: no earlier output may see it
  Tensor y2 = attn->forward(q, k, v2, AttentionMask{});
  CHECK(eng::test::max_abs_diff(narrow(y2, 2, 0, 5), narrow(y, 2, 0, 5)) == 0.0);
}

TEST_CASE("causal-linear: the RNN form == the parallel form at every position of a 2-layer model") {
  for (const std::string fm : {"elu", "poly2"}) {
    CAPTURE(fm);
    TransformerConfig c;
    c.vocab = 7;
    c.d_model = 8;
    c.heads = 2;
    c.d_ff = 12;
    c.decoder_layers = 2;
    c.max_len = 20;
    c.attention = "causal-linear";
    c.attention_options.set("feature_map", fm);
    c.positional = PositionalKind::Rotary;
    LanguageModel m(c);
    m.eval();
    NoGradGuard no_grad;
    std::vector<double> tokens;
    for (int i = 0; i < 2 * 20; ++i) tokens.push_back(double((i * 5 + 3) % 7));
    Tensor x = from_vector(tokens, {2, 20}, DType::I64);
    Tensor full = m.forward(x);
    auto st = m.new_state();
    double worst = 0;
    for (int64_t t = 0; t < 20; ++t)
      worst = std::max(worst, eng::test::max_abs_diff(m.step(squeeze(narrow(x, 1, t, 1), 1), st),
                                                      squeeze(narrow(full, 1, t, 1), 1)));
    CHECK(worst < 1e-5);  // f32
  }
}

TEST_CASE("causal-linear and linear: finite at N = 65536 with random and large-norm inputs (f32)") {
  const int64_t N = 65536;
  for (const std::string name : {"causal-linear", "linear"})
    for (double scale : {1.0, 1e3}) {
      CAPTURE(name);
      CAPTURE(scale);
      auto attn = make_attention(name, AttentionConfig{});
      Tensor q = mul_scalar(uniform({1, 1, N, 8}, 1, -1, 1), scale).to(DType::F32).set_requires_grad(true);
      Tensor k = mul_scalar(uniform({1, 1, N, 8}, 2, -1, 1), scale).to(DType::F32).set_requires_grad(true);
      Tensor v = mul_scalar(uniform({1, 1, N, 8}, 3, -1, 1), scale).to(DType::F32).set_requires_grad(true);
      Tensor y = attn->forward(q, k, v, AttentionMask{});
      sum(y).backward();
      for (const Tensor& t : {y.detach(), q.grad(), k.grad(), v.grad()}) {
        bool finite = true;
        for (int64_t i = 0; i < t.numel(); ++i) finite = finite && std::isfinite(t.data<float>()[i]);
        CHECK(finite);
      }
    }
}
