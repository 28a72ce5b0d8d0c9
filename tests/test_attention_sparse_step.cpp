// The recurrent form of the position-based sparse variants (models/attention/sparse_step.cpp): step() at every
// position equals the row of the causal parallel form (the block-sparse kernel over the pattern's layout), at
// lengths past the window and the block size, with grouped-query K/V and with ALiBi; band's state is a ring of
// window + 1 positions whatever the length, and the others keep only what a later row reads (global prefix,
// summary cells); variants whose row depends on the length, or that have no causal form, have no step.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "models/attention/sparse_attention.h"
#include "models/positional.h"
#include "ops/binary.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::max_abs_diff;

namespace {

constexpr int64_t kB = 2, kH = 4, kD = 8, kL = 40;

using Options = std::vector<std::pair<std::string, std::string>>;

std::unique_ptr<Attention> build(const std::string& name, const Options& options, bool causal = true) {
  AttentionConfig c;
  c.heads = kH;
  c.head_dim = kD;
  c.causal = causal;
  c.seed = 11;
  for (const auto& o : options) c.options.set(o.first, o.second);
  return make_attention(name, c);
}

// The largest difference between step() at positions 0 .. kL-1 and the causal parallel form, for K/V of
// `kv_heads` heads (repeated to kH for the parallel form), in `dtype`, with ALiBi when asked.
double step_vs_parallel(Attention& a, int64_t kv_heads, DType dtype, bool alibi) {
  Rng rng(5);
  const Tensor q = randn({kB, kH, kL, kD}, rng, dtype);
  const Tensor k = randn({kB, kv_heads, kL, kD}, rng, dtype);
  const Tensor v = randn({kB, kv_heads, kL, kD}, rng, dtype);
  AttentionMask mask;
  mask.causal = true;
  if (alibi) mask.alibi_slopes = alibi_slopes(kH).to(dtype);
  NoGradGuard no_grad;
  const Tensor full = a.forward(q, repeat_heads(k, kH), repeat_heads(v, kH), mask);
  auto state = a.new_state();
  REQUIRE(state);
  double worst = 0;
  for (int64_t t = 0; t < kL; ++t) {
    const Tensor out = a.step(narrow(q, 2, t, 1), narrow(k, 2, t, 1), narrow(v, 2, t, 1), *state, mask);
    state->length = t + 1;
    worst = std::max(worst, max_abs_diff(out, narrow(full, 2, t, 1)));
  }
  return worst;
}

struct Case {
  std::string name;
  Options options;
};

// Every variant with a step, with windows, strides and blocks well below kL = 40.
std::vector<Case> cases() {
  return {
      {"band", {{"window", "5"}, {"block", "8"}}},
      {"dilated", {{"window", "3"}, {"dilation", "3"}, {"block", "8"}}},
      {"global", {{"globals", "3"}, {"block", "8"}}},
      {"random", {{"random_blocks", "2"}, {"block", "8"}}},
      {"block-local", {{"block", "8"}}},
      {"longformer", {{"window", "5"}, {"globals", "2"}, {"dilated_heads", "2"}, {"dilation", "3"}, {"block", "8"}}},
      {"longformer", {{"window", "5"}, {"globals", "3"}, {"block", "8"}}},
      {"bigbird", {{"window", "3"}, {"globals", "2"}, {"random_blocks", "2"}, {"block", "8"}}},
      {"sparse-strided", {{"stride", "6"}, {"block", "8"}}},
      {"sparse-strided", {{"stride", "6"}, {"factorize", "merged"}, {"block", "8"}}},
      {"sparse-fixed", {{"stride", "8"}, {"summary", "2"}, {"block", "8"}}},
      {"sparse-fixed", {{"stride", "6"}, {"summary", "3"}, {"factorize", "merged"}, {"block", "8"}}},
      {"image-2d",
       {{"width", "6"}, {"query_rows", "2"}, {"query_cols", "3"}, {"memory_rows", "1"}, {"memory_cols", "1"},
        {"block", "8"}}},
      {"axial", {{"width", "6"}, {"block", "8"}}},
  };
}

}  // namespace

TEST_CASE("sparse step: every pattern's step() equals the causal parallel form at 40 positions (f64, MHA and GQA)") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    CAPTURE(c.options.size());
    auto a = build(c.name, c.options);
    REQUIRE(a->has_step());
    for (int64_t kv_heads : {kH, int64_t(2), int64_t(1)}) {
      CAPTURE(kv_heads);
      CHECK(step_vs_parallel(*a, kv_heads, DType::F64, false) < 1e-9);
    }
  }
}

TEST_CASE("sparse step: ALiBi and f32") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    auto a = build(c.name, c.options);
    CHECK(step_vs_parallel(*a, 1, DType::F64, true) < 1e-9);
    CHECK(step_vs_parallel(*a, kH, DType::F32, true) < 1e-5);
  }
}

TEST_CASE("sparse step: band keeps a ring of window + 1 positions, and step == parallel past it") {
  const int64_t w = 5;
  auto a = build("band", {{"window", std::to_string(w)}, {"block", "4"}});
  Rng rng(7);
  const int64_t L = 3 * w + 4;
  const Tensor q = randn({1, kH, L, kD}, rng, DType::F64);
  const Tensor k = randn({1, 1, L, kD}, rng, DType::F64);
  const Tensor v = randn({1, 1, L, kD}, rng, DType::F64);
  AttentionMask mask;
  mask.causal = true;
  NoGradGuard no_grad;
  const Tensor full = a->forward(q, repeat_heads(k, kH), repeat_heads(v, kH), mask);
  auto state = a->new_state();
  auto* ring = dynamic_cast<SparseKVState*>(state.get());
  REQUIRE(ring);
  for (int64_t t = 0; t < L; ++t) {
    CAPTURE(t);
    const Tensor out = a->step(narrow(q, 2, t, 1), narrow(k, 2, t, 1), narrow(v, 2, t, 1), *state, mask);
    state->length = t + 1;
    CHECK(max_abs_diff(out, narrow(full, 2, t, 1)) < 1e-9);
    CHECK(ring->k.shape() == Shape({1, 1, w + 1, kD}));  // one K/V group, w + 1 slots
    CHECK(ring->v.shape() == Shape({1, 1, w + 1, kD}));
  }
  // A pattern that reads any earlier position keeps every one.
  auto s = build("sparse-strided", {{"stride", "4"}, {"block", "4"}});
  auto cache = s->new_state();
  for (int64_t t = 0; t < L; ++t) {
    s->step(narrow(q, 2, t, 1), narrow(k, 2, t, 1), narrow(v, 2, t, 1), *cache, mask);
    cache->length = t + 1;
  }
  CHECK(dynamic_cast<SparseKVState&>(*cache).slots() >= L);
}

TEST_CASE("sparse step: the state drops what no later row reads, and step == parallel at 64 positions") {
  struct Bounded {
    Case c;
    int64_t ring;
    std::function<int64_t(int64_t)> kept;  // how many of positions 0 .. t a later row still reads
  };
  // Ring sizes: band w + 1, dilated w d + 1, block-local the block, global 1 (the current row), longformer the
  // window's reach + 1, sparse-fixed the stride; kept: the global prefix, or the summary cells (s per stride l).
  const auto none = [](int64_t) { return int64_t(0); };
  const auto prefix = [](int64_t g) { return [g](int64_t t) { return std::min(g, t + 1); }; };
  const std::vector<Bounded> bounded = {
      {{"band", {{"window", "5"}, {"block", "8"}}}, 6, none},
      {{"dilated", {{"window", "3"}, {"dilation", "3"}, {"block", "8"}}}, 10, none},
      {{"block-local", {{"block", "8"}}}, 8, none},
      {{"global", {{"globals", "3"}, {"block", "8"}}}, 1, prefix(3)},
      {{"longformer", {{"window", "5"}, {"globals", "3"}, {"block", "8"}}}, 6, prefix(3)},
      {{"longformer", {{"window", "5"}, {"globals", "2"}, {"dilated_heads", "2"}, {"dilation", "3"}, {"block", "8"}}},
       16, prefix(2)},
      {{"sparse-fixed", {{"stride", "8"}, {"summary", "2"}, {"block", "8"}}}, 8,
       [](int64_t t) { return (t + 1) / 8 * 2 + std::max<int64_t>(0, (t + 1) % 8 - 6); }},
  };
  const int64_t L = 64;
  Rng rng(9);
  const Tensor q = randn({1, kH, L, kD}, rng, DType::F64);
  const Tensor k = randn({1, 2, L, kD}, rng, DType::F64);
  const Tensor v = randn({1, 2, L, kD}, rng, DType::F64);
  AttentionMask mask;
  mask.causal = true;
  NoGradGuard no_grad;
  for (const Bounded& b : bounded) {
    CAPTURE(b.c.name);
    CAPTURE(b.c.options.size());
    auto a = build(b.c.name, b.c.options);
    const Tensor full = a->forward(q, repeat_heads(k, kH), repeat_heads(v, kH), mask);
    auto state = a->new_state();
    auto& s = dynamic_cast<SparseKVState&>(*state);
    CHECK(s.ring == b.ring);
    for (int64_t t = 0; t < L; ++t) {
      CAPTURE(t);
      const Tensor out = a->step(narrow(q, 2, t, 1), narrow(k, 2, t, 1), narrow(v, 2, t, 1), s, mask);
      s.length = t + 1;
      CHECK(max_abs_diff(out, narrow(full, 2, t, 1)) < 1e-9);
      // the ring, then a kept part that doubles: at most twice what it must hold
      CHECK(s.k.shape() == Shape({1, 2, s.slots(), kD}));
      CHECK(s.slots() <= b.ring + 2 * b.kept(t));
    }
    CHECK(s.slots() < L / 2);
  }
}

TEST_CASE("sparse step: variants without a length-independent causal form have none") {
  CHECK_FALSE(build("band", {{"window", "5"}}, false)->has_step());  // built non-causal
  CHECK_FALSE(build("star", {}, false)->has_step());
  CHECK_FALSE(build("etc", {}, false)->has_step());
  CHECK_FALSE(build("bp-transformer", {})->has_step());
  CHECK_FALSE(build("image-2d", {{"query_rows", "2"}, {"query_cols", "2"}})->has_step());  // width from the length
  CHECK_FALSE(build("axial", {})->has_step());
  auto a = build("band", {{"window", "5"}}, false);
  Rng rng(1);
  const Tensor x = randn({1, kH, 1, kD}, rng, DType::F64);
  AttentionState state;
  CHECK_THROWS_WITH(a->step(x, x, x, state, AttentionMask{}),
                    doctest::Contains("attention 'band': no recurrent form (step) for this variant"));
}

TEST_CASE("sparse step: bp-transformer's causal row of token t reads span nodes placed after every token") {
  // T = 8 tokens, then the nodes: level 1 at positions 8..11, level 2 at 12..13, the root at 14. With window 1,
  // token 5 reads tokens 4..5 and node (1, 1) = position 9 (tokens 2..3), which comes after it in the sequence.
  auto a = build("bp-transformer", {{"window", "1"}, {"block", "4"}});
  CHECK_FALSE(a->has_step());
  Rng rng(3);
  const int64_t L = 15;
  const Tensor q = randn({1, kH, L, kD}, rng, DType::F64), k = randn({1, kH, L, kD}, rng, DType::F64);
  const Tensor v = randn({1, kH, L, kD}, rng, DType::F64);
  AttentionMask mask;
  mask.causal = true;
  NoGradGuard no_grad;
  const Tensor before = a->forward(q, k, v, mask);
  auto bump = [&](int64_t position) {  // v at one position + 1, row 5 of the output
    Tensor w = v.clone();
    narrow(w, 2, position, 1).copy_from(add_scalar(narrow(v, 2, position, 1), 1.0));
    return max_abs_diff(narrow(a->forward(q, k, w, mask), 2, 5, 1), narrow(before, 2, 5, 1));
  };
  CHECK(bump(6) == 0.0);  // a later token: the form is causal in the tokens
  CHECK(bump(9) > 1e-3);  // a later position: the node of tokens 2..3
  const Tensor x = randn({1, kH, 1, kD}, rng, DType::F64);
  AttentionState state;
  CHECK_THROWS_WITH(a->step(x, x, x, state, mask), doctest::Contains("reads the span nodes of the complete spans"));
}

TEST_CASE("sparse step: a state from another variant or a skipped length is refused") {
  auto a = build("band", {{"window", "5"}});
  Rng rng(2);
  const Tensor x = randn({1, kH, 1, kD}, rng, DType::F64);
  AttentionMask mask;
  mask.causal = true;
  AttentionState foreign;
  CHECK_THROWS_WITH(a->step(x, x, x, foreign, mask),
                    doctest::Contains("state was not made by this variant's new_state()"));
  auto state = a->new_state();
  state->length = 3;
  CHECK_THROWS_WITH(a->step(x, x, x, *state, mask), doctest::Contains("state.length is 3 but the state holds 0"));
}
