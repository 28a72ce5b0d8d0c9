// Weights packed once for generation (ops/weight_panels.h): linear under a WeightPanelsScope, and
// LanguageModel::step's use of it.
#include "ops/weight_panels.h"

#include "engine/autograd.h"
#include "engine/rng.h"
#include "models/transformer.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;

TEST_CASE("weight panels: linear in a scope == outside it, each weight packed once, only where no gradient is kept") {
  Rng rng(21);
  const Tensor w = randn({96, 64}, rng), w2 = randn({96, 64}, rng), b = randn({96}, rng);
  const Tensor x = randn({32, 1, 64}, rng), x2 = randn({2, 64}, rng);
  const Tensor want = linear(x, w, b), want2 = linear(x, w2, b);
  WeightPanels cache;
  {
    NoGradGuard no_grad;
    const WeightPanelsScope scope(cache);
    CHECK(eng::test::max_abs_diff(linear(x, w, b), want) < 1e-5);
    CHECK(cache.size() == 1);
    CHECK(eng::test::max_abs_diff(linear(x, w, b), want) < 1e-5);
    CHECK(eng::test::max_abs_diff(linear(x, w2, b), want2) < 1e-5);
    CHECK(cache.size() == 2);
    linear(x2, w, b);  // two rows: gemm's dot path, no panels
    CHECK(cache.size() == 2);
  }
  CHECK(active_weight_panels() == nullptr);
  WeightPanels other;
  const WeightPanelsScope scope(other);
  Tensor xg = x.detach().set_requires_grad(true);
  sum(linear(xg, w, b)).backward();  // a gradient to keep: the ordinary path, which records the op
  CHECK(other.size() == 0);
  CHECK(xg.grad().defined());
}

TEST_CASE("weight panels: LanguageModel::step packs each Linear of the model once per state") {
  TransformerConfig c;
  c.vocab = 13, c.d_model = 16, c.heads = 4, c.d_ff = 24, c.decoder_layers = 2, c.max_len = 12;
  c.attention = "causal-linear";
  LanguageModel m(c);
  m.eval();
  NoGradGuard no_grad;
  auto state = m.new_state();
  Tensor ids = zeros({5}, DType::I64);
  m.step(ids, state);
  const size_t packed = state.weights->size();
  CHECK(packed >= 2 * 4);  // q, k and v stacked, output and two feed-forward weights per layer
  m.step(ids, state);
  CHECK(state.weights->size() == packed);
}

TEST_CASE("weight panels: linear_stacked == linear on each weight, bit for bit, where the panels serve it") {
  Rng rng(22);
  const Tensor wq = randn({64, 48}, rng), wk = randn({32, 48}, rng), wv = randn({40, 48}, rng);
  const Tensor bq = randn({64}, rng), bk = randn({32}, rng), bv = randn({40}, rng);
  const Tensor x = randn({32, 1, 48}, rng);
  const std::vector<Tensor> want = {linear(x, wq, bq), linear(x, wk, bk), linear(x, wv, bv)};
  CHECK(linear_stacked(x, {wq, wk, wv}, {bq, bk, bv}).empty());  // no scope
  WeightPanels cache;
  NoGradGuard no_grad;
  const WeightPanelsScope scope(cache);
  for (int round = 0; round < 2; ++round) {  // packed, then served from the cache
    const std::vector<Tensor> got = linear_stacked(x, {wq, wk, wv}, {bq, bk, bv});
    REQUIRE(got.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(got[i].shape() == want[i].shape());
      CHECK(eng::test::max_abs_diff(got[i], want[i]) == 0);
    }
    CHECK(cache.size() == 1);
  }
  CHECK(linear_stacked(randn({2, 48}, rng), {wq, wk}, {bq, bk}).empty());  // two rows: gemm's dot path
  CHECK(linear_stacked(x, {wq, wk}, {bq, Tensor()}).empty());              // a weight without bias
}

TEST_CASE("weight panels: linear_activation == bias_activation(linear), bit for bit, inside the product or not") {
  Rng rng(23);
  const Tensor w = randn({160, 48}, rng), b = randn({160}, rng);
  for (int64_t rows : {2, 15, 32})
    for (BiasActivation act :
         {BiasActivation::None, BiasActivation::Relu, BiasActivation::GeluErf, BiasActivation::GeluTanh}) {
      const Tensor x = randn({rows, 1, 48}, rng);
      const Tensor want = bias_activation(linear(x, w, b), Tensor(), act);
      WeightPanels cache;
      NoGradGuard no_grad;
      const WeightPanelsScope scope(cache);
      CHECK(eng::test::max_abs_diff(linear_activation(x, w, b, act), want) == 0);
      CHECK(cache.size() == (rows > 2 ? 1u : 0u));
    }
}
