// The recurrent forms of the content-based variants (sinkhorn, reformer, routing, causal-improved-clustered), against
// their own parallel forms, which share no code with the steps (causal-improved-clustered shares its per-row key
// choice): step t equals row t of the causal parallel form of the whole sequence, which equals that of the prefix
// 0 … t (no row reads a later hash, route or cluster), and a 2-layer model's step logits equal its forward logits.
// Lengths run past the block, window, bucket and cluster sizes, with grouped-query K/V.
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "models/attention/attention.h"
#include "models/attention/reformer.h"
#include "models/attention/routing.h"
#include "models/transformer.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::max_abs_diff;

namespace {

constexpr int64_t kB = 2, kH = 4, kD = 8, kL = 20;

using Options = std::vector<std::pair<std::string, std::string>>;

struct Case {
  std::string name;
  Options options;
};

const Case kSinkhorn{"sinkhorn", {{"block", "4"}, {"iters", "3"}}};

// Blocks of 4; reformer windows of 4 (chunk 2) over 2 buckets; routing lists of 3 over 2 clusters; 3 query
// clusters and top 4: kL = 20 positions pass each several times.
std::vector<Case> content_cases() {
  return {
      kSinkhorn,
      {"reformer", {{"buckets", "2"}, {"chunk", "2"}}},
      {"reformer", {{"buckets", "4"}, {"chunk", "2"}, {"rounds", "3"}, {"dedup", "true"}}},
      {"routing", {{"clusters", "2"}, {"window", "3"}}},
      {"routing", {{"clusters", "3"}, {"shared_qk", "true"}}},
      {"causal-improved-clustered", {{"clusters", "3"}, {"topk", "4"}, {"bits", "8"}, {"iterations", "3"}}},
  };
}

std::unique_ptr<Attention> build(const Case& c, bool causal = true) {
  AttentionConfig config;
  config.heads = kH;
  config.head_dim = kD;
  config.causal = causal;
  config.max_len = kL;
  config.seed = 13;
  for (const auto& o : c.options) config.options.set(o.first, o.second);
  auto a = make_attention(c.name, config);
  a->eval();
  return a;
}

struct Inputs {
  Tensor q, k, v;  // k and v with `kv_heads` heads
};

Inputs inputs(int64_t kv_heads, DType dtype, uint64_t seed) {
  Rng rng(seed);
  Inputs in;
  in.q = randn({kB, kH, kL, kD}, rng, dtype);
  in.k = randn({kB, kv_heads, kL, kD}, rng, dtype);
  in.v = randn({kB, kv_heads, kL, kD}, rng, dtype);
  for (const Tensor& x : {in.q, in.k, in.v}) {  // repeated positions: equal scores, codes and buckets meet the tie rules
    narrow(x, 2, 9, 1).copy_from(narrow(x, 2, 2, 1));
    narrow(x, 2, 14, 1).copy_from(narrow(x, 2, 5, 1));
  }
  return in;
}

// Row t of the causal parallel form of positions 0 … n-1, K/V repeated to kH heads.
Tensor parallel_row(Attention& a, const Inputs& in, int64_t n, int64_t t) {
  AttentionMask causal;
  causal.causal = true;
  const Tensor out = a.forward(narrow(in.q, 2, 0, n), repeat_heads(narrow(in.k, 2, 0, n), kH),
                               repeat_heads(narrow(in.v, 2, 0, n), kH), causal);
  return narrow(out, 2, t, 1);
}

// The largest difference between step() at positions 0 … kL-1 and row t of the causal parallel form of all kL
// positions.
double step_error(Attention& a, int64_t kv_heads, DType dtype) {
  const Inputs in = inputs(kv_heads, dtype, 5);
  NoGradGuard no_grad;
  auto state = a.new_state();
  REQUIRE(state);
  AttentionMask mask;
  mask.causal = true;
  double worst = 0;
  for (int64_t t = 0; t < kL; ++t) {
    mask.query_offset = t;
    const Tensor out = a.step(narrow(in.q, 2, t, 1), narrow(in.k, 2, t, 1), narrow(in.v, 2, t, 1), *state, mask);
    state->length = t + 1;
    worst = std::max(worst, max_abs_diff(out, parallel_row(a, in, kL, t)));
  }
  return worst;
}

TransformerConfig model_config(const Case& c, int64_t layers, int64_t kv_heads) {
  TransformerConfig m;
  m.vocab = 9;
  m.d_model = kH * kD;
  m.heads = kH;
  m.kv_heads = kv_heads;
  m.d_ff = 24;
  m.decoder_layers = layers;
  m.max_len = kL;
  m.attention = c.name;
  for (const auto& o : c.options) m.attention_options.set(o.first, o.second);
  return m;
}

Tensor token_ids(uint64_t seed) {
  Rng rng(seed);
  std::vector<double> ids;
  for (int64_t i = 0; i < kB * kL; ++i) ids.push_back(double(rng.below(9)));
  return from_vector(ids, {kB, kL}, DType::I64);
}

// The largest difference between a model's step() logits at every position and its forward's logits at that
// position; in f32.
double model_step_error(const Case& c, int64_t layers, int64_t kv_heads) {
  LanguageModel model(model_config(c, layers, kv_heads));
  model.eval();
  NoGradGuard no_grad;
  const Tensor x = token_ids(7);
  const Tensor whole = model.forward(x);
  auto state = model.new_state();
  double worst = 0;
  for (int64_t t = 0; t < kL; ++t) {
    const Tensor logits = model.step(squeeze(narrow(x, 1, t, 1), 1), state);
    worst = std::max(worst, max_abs_diff(logits, squeeze(narrow(whole, 1, t, 1), 1)));
  }
  return worst;
}

}  // namespace

TEST_CASE("recurrent content: step equals the causal parallel form of the whole sequence (f64, f32, GQA)") {
  for (const Case& c : content_cases()) {
    CAPTURE(c.name);
    CAPTURE(c.options.size());
    auto a = build(c);
    for (int64_t kv_heads : {kH, int64_t(2), int64_t(1)}) {
      CAPTURE(kv_heads);
      CHECK(step_error(*a, kv_heads, DType::F64) < 1e-9);
    }
    a->to(DType::F32);
    CHECK(step_error(*a, 2, DType::F32) < 1e-5);
  }
}

TEST_CASE("recurrent content: a causal row is the same in the whole sequence and in its prefix (no later hash)") {
  for (const Case& c : content_cases()) {
    CAPTURE(c.name);
    CAPTURE(c.options.size());
    auto a = build(c);
    const Inputs in = inputs(kH, DType::F64, 6);
    NoGradGuard no_grad;
    for (int64_t t = 0; t < kL; ++t)
      CHECK(max_abs_diff(parallel_row(*a, in, t + 1, t), parallel_row(*a, in, kL, t)) < 1e-12);
  }
}

TEST_CASE("recurrent content: a 2-layer model generates the parallel form's logits (f32, MHA and GQA)") {
  for (const Case& c : content_cases()) {
    CAPTURE(c.name);
    CAPTURE(c.options.size());
    for (int64_t kv_heads : {int64_t(0), int64_t(2)}) {
      CAPTURE(kv_heads);
      CHECK(model_step_error(c, 2, kv_heads) < 1e-5);
    }
  }
}

TEST_CASE("recurrent content: reformer's state grows to R·nb rings of w slots, never more, whatever the length") {
  auto a = build({"reformer", {{"buckets", "2"}, {"chunk", "2"}, {"rounds", "2"}}});
  const Inputs in = inputs(2, DType::F64, 8);
  AttentionMask mask;
  mask.causal = true;
  auto state = a->new_state();
  for (int64_t t = 0; t < kL; ++t) {
    mask.query_offset = t;
    a->step(narrow(in.q, 2, t, 1), narrow(in.k, 2, t, 1), narrow(in.v, 2, t, 1), *state, mask);
    state->length = t + 1;
    const auto& s = dynamic_cast<const ReformerState&>(*state);  // w = 4 (chunk 2): rings of 4 from the start
    CHECK(s.keys.shape() == Shape{kB, kH, 4, 4, kD});
    CHECK(s.values.shape() == Shape{kB, kH, 4, 4, kD});
  }
  // w = 24 (chunk 12) over 20 steps of 2 buckets: 8 slots, then 16 when a bucket passes 8 positions, never 24
  auto wide = build({"reformer", {{"buckets", "2"}, {"chunk", "12"}}});
  auto ws = wide->new_state();
  int64_t grew = 0;
  for (int64_t t = 0; t < kL; ++t) {
    mask.query_offset = t;
    const Tensor out = wide->step(narrow(in.q, 2, t, 1), narrow(in.k, 2, t, 1), narrow(in.v, 2, t, 1), *ws, mask);
    ws->length = t + 1;
    const int64_t cap = dynamic_cast<const ReformerState&>(*ws).keys.size(3);
    CHECK((cap == 8 || cap == 16));
    grew += cap == 16;
    CHECK(max_abs_diff(out, parallel_row(*wide, in, kL, t)) < 1e-9);  // the same rows before and after growing
  }
  CHECK(grew > 0);
}

TEST_CASE("recurrent content: step keeps the hashes, clusters and centroids fixed, even in training mode") {
  auto r = build(content_cases()[1]);
  auto ro = build(content_cases()[3]);
  r->train();
  ro->train();
  const std::vector<double> centroids = dynamic_cast<RoutingAttention&>(*ro).centroids().to_vector();
  const Inputs in = inputs(kH, DType::F64, 3);
  AttentionMask mask;
  mask.causal = true;
  auto rs = r->new_state();
  auto ros = ro->new_state();
  for (int64_t t = 0; t < 6; ++t) {
    mask.query_offset = t;
    r->step(narrow(in.q, 2, t, 1), narrow(in.k, 2, t, 1), narrow(in.v, 2, t, 1), *rs, mask);
    ro->step(narrow(in.q, 2, t, 1), narrow(in.k, 2, t, 1), narrow(in.v, 2, t, 1), *ros, mask);
    rs->length = ros->length = t + 1;
  }
  CHECK(dynamic_cast<ReformerAttention&>(*r).call() == 0);
  CHECK(dynamic_cast<RoutingAttention&>(*ro).centroids().to_vector() == centroids);
}

TEST_CASE("recurrent content: no step without a causal form; foreign states, skipped lengths, max_len refused") {
  for (const Case& c : content_cases()) CHECK_FALSE(build(c, false)->has_step());  // built non-causal
  CHECK_FALSE(build({"sinkhorn", {{"block", "4"}, {"sortcut", "2"}}}, false)->has_step());
  CHECK_FALSE(build({"clustered", {}}, false)->has_step());
  CHECK_FALSE(build({"improved-clustered", {}}, false)->has_step());
  const Inputs in = inputs(kH, DType::F64, 4);
  const Tensor q = narrow(in.q, 2, 0, 1), k = narrow(in.k, 2, 0, 1), v = narrow(in.v, 2, 0, 1);
  AttentionMask mask;
  mask.causal = true;
  for (const Case& c : content_cases()) {
    CAPTURE(c.name);
    auto a = build(c);
    AttentionState foreign;
    CHECK_THROWS_WITH(a->step(q, k, v, foreign, mask),
                      doctest::Contains("state was not made by this variant's new_state()"));
    auto state = a->new_state();
    state->length = 3;
    CHECK_THROWS_WITH(a->step(q, k, v, *state, mask), doctest::Contains("state.length is 3 but the state holds 0"));
  }
  auto s = build(kSinkhorn);
  auto state = s->new_state();
  for (int64_t t = 0; t < kL; ++t, state->length = t) s->step(q, k, v, *state, mask);
  CHECK_THROWS_WITH(s->step(q, k, v, *state, mask),
                    "attention 'sinkhorn' step: position 20 is past max_len 20 that the sorting network was built for");
}
