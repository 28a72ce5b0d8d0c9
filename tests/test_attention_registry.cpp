// The registry sweep: every registered attention variant, built with the options it declares for the sweep, is
// held to what it declares (AttentionAccepts, models/attention/attention.h). References: for each mask feature a
// variant accepts, an outcome computed by hand (a bias or keep mask that leaves key 0 alone makes every output v_0);
// for its recurrent form, its own causal parallel form; for the rest, the shared refusal's words. No variant is
// skipped: one that cannot be built from its sweep options fails here.
#include <cmath>
#include <fstream>
#include <sstream>

#include "engine/autograd.h"
#include "engine/error.h"
#include "models/attention/attention.h"
#include "models/transformer.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::max_abs_diff;

namespace {

constexpr int64_t kB = 2, kH = 2, kD = 8, kTokens = 16;

std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  for (const auto& v : attention_variants()) names.push_back(v.first);
  return names;
}

AttentionOptions sweep_options(const std::string& name) { return AttentionOptions(attention_sweep_options(name)); }

// The variant in f64 for `tokens` tokens, built causal or not; null (with its error) when it refuses the build.
std::unique_ptr<Attention> build(const std::string& name, bool causal, std::string* error = nullptr) {
  AttentionConfig c;
  c.heads = kH;
  c.head_dim = kD;
  c.causal = causal;
  c.seed = 3;
  c.options = sweep_options(name);
  c.max_len = kTokens;
  try {
    c.max_len = make_attention(name, c)->positions(kTokens);  // length-sized parameters fit every position
    c.options = sweep_options(name);                          // unread again
    auto a = make_attention(name, c);
    a->to(DType::F64);
    return a;
  } catch (const Error& e) {
    if (error) *error = e.what();
    return nullptr;
  }
}

bool all_finite(const Tensor& t) {
  for (double x : t.to_vector())
    if (!std::isfinite(x)) return false;
  return true;
}

// Runs `a` on a call and returns "" when it ran (finite, of the right shape), else the error's words.
std::string outcome(Attention& a, int64_t Lq, int64_t Lk, const AttentionMask& mask) {
  const Tensor q = eng::test::uniform({kB, kH, Lq, kD}, 31), k = eng::test::uniform({kB, kH, Lk, kD}, 32),
               v = eng::test::uniform({kB, kH, Lk, kD}, 33);
  try {
    const Tensor y = a.forward(q, k, v, mask);
    if (y.shape() != Shape{kB, kH, Lq, kD}) return "wrong shape " + shape_str(y.shape());
    return all_finite(y) ? "" : "not finite";
  } catch (const Error& e) {
    return e.what();
  }
}

// One call per declared feature: the mask (on top of `base`), the number of queries and keys.
struct Probe {
  const char* feature;
  bool accepted;
  AttentionMask mask;
  int64_t Lq, Lk;
};

std::vector<Probe> probes(const AttentionAccepts& acc, bool causal, int64_t L) {
  AttentionMask base;
  base.causal = causal;
  std::vector<Probe> out;
  AttentionMask m = base;
  m.causal = true;
  out.push_back({"causal", acc.causal, m, L, L});
  m.causal = false;
  out.push_back({"non-causal", acc.non_causal, m, L, L});
  m = base;
  m.key_lengths = {L, L - 3};
  out.push_back({"key padding", acc.key_lengths, m, L, L});
  m = base;
  m.keep = full({1, 1, L, L}, 1.0, DType::F64);
  for (int64_t i = 2; i < L; ++i) m.keep.set_at({0, 0, i, 1}, 0.0);
  out.push_back({"keep", acc.keep, m, L, L});
  m = base;
  m.bias = mul_scalar(eng::test::uniform({1, 1, L, L}, 34), 0.5);
  out.push_back({"bias", acc.bias, m, L, L});
  m = base;
  m.alibi_slopes = from_vector({0.5, 0.25}, {kH}, DType::F64);
  out.push_back({"ALiBi", acc.alibi, m, L, L});
  if (acc.causal) {
    m = base;
    m.causal = true;
    m.query_offset = 4;
    out.push_back({"query offset", acc.query_offset, m, L - 4, L});
  }
  if (acc.non_causal && !causal) {
    m = base;
    out.push_back({"cross-attention", acc.cross, m, L / 2, L});
  }
  return out;
}

TransformerConfig small_model(const std::string& name, const Attention& a, int64_t kv_heads) {
  TransformerConfig c;
  c.vocab = 7;
  c.d_model = kH * kD;
  c.heads = kH;
  c.kv_heads = kv_heads;
  c.d_ff = 24;
  c.decoder_layers = 2;
  c.max_len = a.positions(kTokens);
  c.attention = name;
  c.attention_options = sweep_options(name);
  return c;
}

Tensor token_ids(int64_t B, int64_t L, uint64_t seed) {
  Rng rng(seed);
  std::vector<double> v;
  for (int64_t i = 0; i < B * L; ++i) v.push_back(double(rng.below(7)));
  return from_vector(v, {B, L}, DType::I64);
}

}  // namespace

TEST_CASE("attention registry: every variant has its docs/attention page and a README link to it") {
  std::ifstream readme_file("README.md");
  REQUIRE_MESSAGE(readme_file.good(), "README.md not found (run the tests from the repository root)");
  std::stringstream readme;
  readme << readme_file.rdbuf();
  for (const std::string& name : variant_names()) {
    CAPTURE(name);
    const std::string page = "docs/attention/" + name + ".md";
    CHECK_MESSAGE(std::ifstream(page).good(), page, " is missing");
    CHECK_MESSAGE(readme.str().find(page) != std::string::npos, "README.md does not link ", page);
  }
}

TEST_CASE("attention registry: what a variant accepts runs; the rest is refused with the shared message") {
  int built = 0;
  for (const std::string& name : variant_names())
    for (bool causal : {false, true}) {
      CAPTURE(name);
      CAPTURE(causal);
      std::string error;
      const auto a = build(name, causal, &error);
      const auto plain = build(name, false);
      const AttentionAccepts acc = plain ? plain->accepts() : AttentionAccepts{};
      if (!a) {  // a build refused only for causality, in the shared words
        CHECK(causal);
        CHECK_FALSE(acc.causal);
        CHECK(error.rfind("attention '" + name + "': does not take a causal mask", 0) == 0);
        continue;
      }
      ++built;
      const int64_t L = a->positions(kTokens);
      for (const Probe& p : probes(a->accepts(), causal, L)) {
        CAPTURE(p.feature);
        const std::string got = outcome(*a, p.Lq, p.Lk, p.mask);
        if (p.accepted) {
          CHECK_MESSAGE(got.empty(), got);
        } else {
          CHECK_MESSAGE(got.rfind("attention '" + name + "': does not take ", 0) == 0, got);
          CHECK_MESSAGE(got.find("; it takes: ") != std::string::npos, got);
        }
      }
    }
  CHECK(built >= int(variant_names().size()));
}

TEST_CASE("attention registry: a declared bias or keep mask reaches the logits (key 0 alone left: outputs are v_0)") {
  // A bias of -1e4, or keep 0, on every key but key 0 leaves each query one key: its output is v_0 exactly (up to
  // e^-1e4). Relative positions and padding rely on it, in the parallel form and in step().
  for (const std::string& name : variant_names())
    for (bool causal : {false, true}) {
      CAPTURE(name);
      CAPTURE(causal);
      const auto a = build(name, causal);
      if (!a) continue;
      const int64_t L = a->positions(kTokens);
      const Tensor q = eng::test::uniform({1, kH, L, kD}, 22), k = eng::test::uniform({1, kH, L, kD}, 23),
                   v = eng::test::uniform({1, kH, L, kD}, 24);
      const Tensor v0 = expand(narrow(v, 2, 0, 1), {1, kH, L, kD});
      AttentionMask m;
      m.causal = causal;
      if (a->accepts().bias) {
        const Tensor bias = full({1, 1, L, L}, -1e4, DType::F64);
        for (int64_t i = 0; i < L; ++i) bias.set_at({0, 0, i, 0}, 0);
        m.bias = bias;
        CHECK(max_abs_diff(a->forward(q, k, v, m), v0) < 1e-9);
        m.bias = Tensor();
        auto state = causal ? a->new_state() : nullptr;
        for (int64_t t = 0; state && t < L; ++t) {  // the step's row of the bias: keys 0 .. t
          AttentionMask row;
          row.causal = true;
          row.query_offset = t;
          row.bias = narrow(narrow(bias, 2, t, 1), 3, 0, t + 1);
          const Tensor o = a->step(narrow(q, 2, t, 1), narrow(k, 2, t, 1), narrow(v, 2, t, 1), *state, row);
          state->length++;
          CHECK(max_abs_diff(o, narrow(v0, 2, t, 1)) < 1e-9);
        }
      }
      if (a->accepts().keep) {
        m.keep = full({1, 1, L, L}, 0.0, DType::F64);
        for (int64_t i = 0; i < L; ++i) m.keep.set_at({0, 0, i, 0}, 1);
        CHECK(max_abs_diff(a->forward(q, k, v, m), v0) < 1e-9);
      }
    }
}

TEST_CASE("attention registry: a 2-layer model of every variant has finite outputs and gradients") {
  for (const std::string& name : variant_names()) {
    CAPTURE(name);
    const auto plain = build(name, false);
    const bool causal = plain ? plain->accepts().causal : true;
    const auto a = build(name, causal);
    REQUIRE(a);
    for (int64_t kv_heads : {0, 1}) {  // multi-head and multi-query: every variant takes K/V groups
      CAPTURE(kv_heads);
      LanguageModel model(small_model(name, *a, kv_heads), causal);
      const Tensor logits = model.forward(token_ids(kB, a->positions(kTokens), 5));
      CHECK(all_finite(logits));
      sum(mul(logits, logits)).backward();
      int with_grad = 0;
      for (const auto& named : model.named_parameters()) {
        CAPTURE(named.first);
        if (!named.second.grad().defined()) continue;
        ++with_grad;
        CHECK(all_finite(named.second.grad()));
      }
      // All but the key projections of variants that read no keys (reformer's shared QK, synthesizer's
      // synthesised weights): 2 layers x weight and bias.
      CHECK(with_grad >= int(model.named_parameters().size()) - 4);
    }
  }
}

TEST_CASE("attention registry: no causal row reads a later position (its hash, route, cluster or value)") {
  // Whatever a variant chooses from the content (keys, buckets, routes, clusters), a causal row t may choose it
  // only from positions 0 … t: new q, k and v at positions >= cut leave rows < cut the same (within 1e-12: a
  // fused kernel may group a row's sum differently when later positions move; a leak moves rows by O(1)).
  int causal_variants = 0;
  for (const std::string& name : variant_names()) {
    CAPTURE(name);
    const auto a = build(name, true);
    if (!a || !a->accepts().causal) continue;
    ++causal_variants;
    a->eval();  // no hash redraw or centroid update between the two calls
    const int64_t L = a->positions(kTokens);
    const Tensor q = eng::test::uniform({kB, kH, L, kD}, 41), k = eng::test::uniform({kB, kH, L, kD}, 42),
                 v = eng::test::uniform({kB, kH, L, kD}, 43);
    AttentionMask m;
    m.causal = true;
    const Tensor y = a->forward(q, k, v, m);
    for (int64_t cut : {kTokens - 1, kTokens / 2, int64_t(1)}) {
      CAPTURE(cut);
      auto later = [&](const Tensor& x, uint64_t seed) {  // x with positions cut … kTokens − 1 drawn anew
        const Tensor fresh = eng::test::uniform({kB, kH, kTokens - cut, kD}, seed);
        std::vector<Tensor> parts{narrow(x, 2, 0, cut), fresh};
        if (L > kTokens) parts.push_back(narrow(x, 2, kTokens, L - kTokens));
        return concat(parts, 2);
      };
      const Tensor y2 = a->forward(later(q, 51 + cut), later(k, 52 + cut), later(v, 53 + cut), m);
      CHECK(max_abs_diff(narrow(y2, 2, 0, cut), narrow(y, 2, 0, cut)) < 1e-12);
    }
  }
  CHECK(causal_variants >= 30);
}

TEST_CASE("attention registry: step() equals the causal parallel form at every position (MHA and MQA)") {
  int with_step = 0;
  for (const std::string& name : variant_names()) {
    CAPTURE(name);
    const auto a = build(name, true);
    if (!a || !a->has_step()) continue;
    ++with_step;
    for (int64_t kv_heads : {0, 1}) {
      CAPTURE(kv_heads);
      LanguageModel model(small_model(name, *a, kv_heads));
      model.to(DType::F64);
      model.eval();
      NoGradGuard no_grad;
      const int64_t L = kTokens;
      const Tensor x = token_ids(kB, L, 9);
      const Tensor full_logits = model.forward(x);
      auto st = model.new_state();
      for (int64_t t = 0; t < L; ++t) {
        CAPTURE(t);
        const Tensor lt = model.step(squeeze(narrow(x, 1, t, 1), 1), st);
        CHECK(max_abs_diff(lt, squeeze(narrow(full_logits, 1, t, 1), 1)) < 1e-9);
      }
    }
  }
  CHECK(with_step >= 7);
}
