// The `performer` variant (models/attention/performer.h): its orthogonal random features, FAVOR+ against a naive
// loop and against exact softmax attention, causality, redraw policy, the recurrent form, gradients, errors.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "models/attention/performer.h"
#include "models/checkpoint.h"
#include "models/transformer.h"
#include "ops/attention_naive.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

std::unique_ptr<PerformerAttention> make_performer(int64_t D, int64_t features, const std::string& redraw,
                                                   uint64_t seed = 7) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = D, cfg.seed = seed;
  cfg.options.set("features", std::to_string(features));
  cfg.options.set("redraw", redraw);
  auto a = make_attention("performer", cfg);
  return std::unique_ptr<PerformerAttention>(dynamic_cast<PerformerAttention*>(a.release()));
}

// φ(x) = exp(ωᵀx' − |x'|²/2) / √m with x' = x D^(-1/4), by the definition (no stabiliser), in double.
std::vector<double> phi(const Tensor& x, int64_t b, int64_t h, int64_t i, const Tensor& omega) {
  const int64_t m = omega.size(0), D = omega.size(1);
  const double s = std::pow(double(D), -0.25);
  double sq = 0;
  for (int64_t d = 0; d < D; ++d) sq += x.at({b, h, i, d}) * s * x.at({b, h, i, d}) * s;
  std::vector<double> f(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += omega.at({r, d}) * x.at({b, h, i, d}) * s;
    f[size_t(r)] = std::exp(dot - sq / 2) / std::sqrt(double(m));
  }
  return f;
}

// FAVOR+ by loops: out_i = Σ_j (φ(q_i)·φ(k_j)) v_j / Σ_j φ(q_i)·φ(k_j) over the visible keys.
Tensor naive_favor(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& omega, bool causal,
                   const std::vector<int64_t>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), L = k.size(2), Dv = v.size(3);
  Tensor out = zeros({B, H, N, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < N; ++i) {
        const std::vector<double> fq = phi(q, b, h, i, omega);
        int64_t end = lengths.empty() ? L : lengths[size_t(b)];
        if (causal) end = std::min(end, i + 1);
        double den = 0;
        std::vector<double> num(size_t(Dv), 0.0);
        for (int64_t j = 0; j < end; ++j) {
          const std::vector<double> fk = phi(k, b, h, j, omega);
          double a = 0;
          for (size_t r = 0; r < fq.size(); ++r) a += fq[r] * fk[r];
          den += a;
          for (int64_t e = 0; e < Dv; ++e) num[size_t(e)] += a * v.at({b, h, j, e});
        }
        for (int64_t e = 0; e < Dv; ++e) out.set_at({b, h, i, e}, den > 0 ? num[size_t(e)] / den : 0.0);
      }
  return out;
}

// Largest |a - b| relative to the largest |b|.
double rel_err(const Tensor& a, const Tensor& b) {
  double scale = 0;
  for (double x : b.to_vector()) scale = std::max(scale, std::abs(x));
  return max_abs_diff(a, b) / scale;
}

AttentionMask causal_mask() {
  AttentionMask m;
  m.causal = true;
  return m;
}

}  // namespace

TEST_CASE("performer_projection: orthogonal blocks, chi row norms, Haar signs, a pure function of (seed, draw)") {
  const int64_t D = 16, m = 40;  // blocks of 16, 16 and 8 rows
  const Tensor w = performer_projection(m, D, 3, 5);
  REQUIRE(w.shape() == Shape{m, D});
  for (int64_t r = 0; r < m; ++r)
    for (int64_t s = r / D * D; s < std::min(m, r / D * D + D); ++s) {  // rows of the same block
      double dot = 0, nr = 0, ns = 0;
      for (int64_t d = 0; d < D; ++d) {
        dot += w.at({r, d}) * w.at({s, d});
        nr += w.at({r, d}) * w.at({r, d});
        ns += w.at({s, d}) * w.at({s, d});
      }
      if (r == s) continue;
      CHECK(std::abs(dot) / std::sqrt(nr * ns) < 1e-13);  // ωωᵀ is diagonal within a block
    }
  CHECK(max_abs_diff(performer_projection(m, D, 3, 5), w) == 0);
  CHECK(max_abs_diff(performer_projection(m, D, 3, 6), w) > 0.1);
  CHECK(max_abs_diff(performer_projection(m, D, 4, 5), w) > 0.1);
  // Over 200 draws: squared row norms average D (chi² with D degrees of freedom, variance 2D), and each block's
  // diagonal entries, normalised by the row norm, average 0 (they would be biased without the sign correction).
  double norm2 = 0, diag = 0;
  int64_t rows = 0, diags = 0;
  for (uint64_t draw = 0; draw < 200; ++draw) {
    const Tensor u = performer_projection(D, D, 11, draw);
    for (int64_t r = 0; r < D; ++r) {
      double n2 = 0;
      for (int64_t d = 0; d < D; ++d) n2 += u.at({r, d}) * u.at({r, d});
      norm2 += n2, ++rows;
      diag += u.at({r, r}) / std::sqrt(n2), ++diags;
    }
  }
  CHECK(std::abs(norm2 / rows - D) < 4 * std::sqrt(2.0 * D / rows));
  CHECK(std::abs(diag / diags) < 4 / std::sqrt(double(D * diags)));
}

TEST_CASE("performer: φ(q)ᵀφ(k) is an unbiased estimate of exp(qᵀk/√D) (mean over 4000 draws)") {
  const int64_t D = 4, m = 8;
  const Tensor x = uniform({1, 1, 2, D}, 1, -1, 1);
  double dot = 0;
  for (int64_t d = 0; d < D; ++d) dot += x.at({0, 0, 0, d}) * x.at({0, 0, 1, d});
  const double want = std::exp(dot / std::sqrt(double(D)));
  const int draws = 4000;
  double sum = 0, sum2 = 0;
  for (int t = 0; t < draws; ++t) {
    const Tensor w = performer_projection(m, D, 21, uint64_t(t));
    const std::vector<double> a = phi(x, 0, 0, 0, w), b = phi(x, 0, 0, 1, w);
    double est = 0;
    for (int64_t r = 0; r < m; ++r) est += a[size_t(r)] * b[size_t(r)];
    sum += est, sum2 += est * est;
  }
  const double mean = sum / draws, sd = std::sqrt(sum2 / draws - mean * mean);
  INFO("mean estimate " << mean << " (sd of one draw " << sd << ") vs exp(q.k/sqrt D) = " << want);
  CHECK(std::abs(mean - want) < 4 * sd / std::sqrt(double(draws)));
}

TEST_CASE("performer == FAVOR+ by loops (f64): non-causal, padded, causal, cross-attention") {
  auto attn = make_performer(4, 12, "never");
  const Tensor q = uniform({2, 2, 6, 4}, 31), k = uniform({2, 2, 6, 4}, 32), v = uniform({2, 2, 6, 3}, 33);
  const Tensor& w = attn->projection();
  CHECK(rel_err(attn->forward(q, k, v, {}), naive_favor(q, k, v, w, false, {})) < 1e-9);
  AttentionMask pad;
  pad.key_lengths = {2, 6};
  CHECK(rel_err(attn->forward(q, k, v, pad), naive_favor(q, k, v, w, false, pad.key_lengths)) < 1e-9);
  CHECK(rel_err(attn->forward(q, k, v, causal_mask()), naive_favor(q, k, v, w, true, {})) < 1e-9);
  AttentionMask both = causal_mask();
  both.key_lengths = {3, 5};
  CHECK(rel_err(attn->forward(q, k, v, both), naive_favor(q, k, v, w, true, both.key_lengths)) < 1e-9);
  const Tensor k9 = uniform({2, 2, 9, 4}, 34), v9 = uniform({2, 2, 9, 3}, 35);
  CHECK(rel_err(attn->forward(q, k9, v9, {}), naive_favor(q, k9, v9, w, false, {})) < 1e-9);
}

TEST_CASE("performer: the error against exact softmax attention falls with the number of features") {
  // Head dim 16, 64 positions, q and k uniform in [-1, 1): mean |performer - softmax| over 4 seeds.
  const int64_t D = 16, N = 64;
  const Tensor q = uniform({1, 2, N, D}, 41), k = uniform({1, 2, N, D}, 42), v = uniform({1, 2, N, 8}, 43);
  std::vector<double> errs;
  for (int64_t m : {16, 64, 256}) {
    for (bool causal : {false, true}) {
      AttentionMask mask;
      mask.causal = causal;
      const Tensor exact = naive_attention(q, k, v, mask, 1.0 / std::sqrt(double(D)));
      double err = 0;
      for (uint64_t seed = 0; seed < 4; ++seed) {
        auto attn = make_performer(D, m, "never", seed);
        double sum = 0;
        const std::vector<double> a = attn->forward(q, k, v, mask).to_vector(), b = exact.to_vector();
        for (size_t i = 0; i < a.size(); ++i) sum += std::abs(a[i] - b[i]);
        err += sum / double(a.size()) / 4;
      }
      errs.push_back(err);
    }
  }
  INFO("mean abs errors (non-causal, causal) at m = 16: " << errs[0] << ", " << errs[1] << "; m = 64: "
                                                         << errs[2] << ", " << errs[3] << "; m = 256: " << errs[4]
                                                         << ", " << errs[5]);
  for (size_t i = 0; i + 2 < errs.size(); ++i) CHECK(errs[i + 2] < errs[i]);
  CHECK(errs[4] < 0.015);  // m = 256, non-causal: measured 0.0106
  CHECK(errs[5] < 0.025);  // m = 256, causal: measured 0.0174
}

TEST_CASE("performer: causal output at position i ignores keys and values after i, even huge ones") {
  auto attn = make_performer(8, 32, "never");
  const Tensor q = uniform({1, 2, 70, 8}, 51), k = uniform({1, 2, 70, 8}, 52), v = uniform({1, 2, 70, 4}, 53);
  const Tensor ref = attn->forward(q, k, v, causal_mask());
  const Tensor other = uniform({1, 2, 70, 8}, 54);
  for (int64_t i : {0, 5, 63, 64})  // inside the first chunk of 64 and across its edge
    for (bool huge_keys : {true, false}) {  // huge keys have features 0; ordinary ones do not
      Tensor k2 = k.clone(), v2 = v.clone();
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t j = i + 1; j < 70; ++j) {
          for (int64_t d = 0; d < 8; ++d)
            k2.set_at({0, h, j, d}, huge_keys ? 1e4 * (d % 2 ? 1 : -1) : other.at({0, h, j, d}));
          for (int64_t e = 0; e < 4; ++e) v2.set_at({0, h, j, e}, huge_keys ? 1e4 : -1e4);
        }
      const Tensor y = attn->forward(q, k2, v2, causal_mask());
      CAPTURE(i);
      CAPTURE(huge_keys);
      CHECK(max_abs_diff(narrow(y, 2, 0, i + 1), narrow(ref, 2, 0, i + 1)) == 0);
      CHECK(max_abs_diff(y, ref) > 0);  // the later positions did change
    }
}

TEST_CASE("performer: redraw policy (always, every:N, never) in training mode; eval mode never redraws") {
  const Tensor q = uniform({1, 2, 5, 4}, 61), k = uniform({1, 2, 5, 4}, 62), v = uniform({1, 2, 5, 3}, 63);
  auto run = [&](PerformerAttention& a) { return a.forward(q, k, v, {}); };
  SUBCASE("always: every training call draws a new ω") {
    auto a = make_performer(4, 8, "always");
    const Tensor y0 = run(*a), y1 = run(*a);
    CHECK(a->draw() == 1);
    CHECK(max_abs_diff(y0, y1) > 1e-6);
    a->eval();
    const Tensor e0 = run(*a), e1 = run(*a);
    CHECK(max_abs_diff(e0, e1) == 0);
    CHECK(max_abs_diff(e0, y1) == 0);  // eval keeps the last training draw
    CHECK(a->training_calls() == 2);
  }
  SUBCASE("never: one ω for good") {
    auto a = make_performer(4, 8, "never");
    const Tensor y0 = run(*a), y1 = run(*a), y2 = run(*a);
    CHECK(max_abs_diff(y0, y1) == 0);
    CHECK(max_abs_diff(y1, y2) == 0);
    CHECK(a->draw() == 0);
  }
  SUBCASE("every:2: draws 0, 0, 1, 1, 2") {
    auto a = make_performer(4, 8, "every:2");
    std::vector<Tensor> ys;
    std::vector<uint64_t> draws;
    for (int t = 0; t < 5; ++t) {
      ys.push_back(run(*a));
      draws.push_back(a->draw());
    }
    CHECK(draws == std::vector<uint64_t>{0, 0, 1, 1, 2});
    CHECK(max_abs_diff(ys[0], ys[1]) == 0);
    CHECK(max_abs_diff(ys[1], ys[2]) > 1e-6);
    CHECK(max_abs_diff(ys[2], ys[3]) == 0);
    CHECK(max_abs_diff(ys[3], ys[4]) > 1e-6);
  }
  SUBCASE("a fresh instance replays ω from the training call count (what a checkpoint saves)") {
    auto a = make_performer(4, 8, "every:3"), b = make_performer(4, 8, "every:3");
    for (int t = 0; t < 7; ++t) run(*a);
    b->set_training_calls(a->training_calls());
    CHECK(b->draw() == a->draw());
    CHECK(max_abs_diff(b->projection(), a->projection()) == 0);
    CHECK(max_abs_diff(run(*a), run(*b)) == 0);  // and they continue in step
  }
}

TEST_CASE("performer: step() token by token == the causal parallel form at every position") {
  for (DType dt : {DType::F64, DType::F32}) {
    CAPTURE(dt);
    auto attn = make_performer(8, 32, "always");
    attn->eval();
    const int64_t T = 70;
    const Tensor q = uniform({2, 2, T, 8}, 71, -2, 2).to(dt), k = uniform({2, 2, T, 8}, 72, -2, 2).to(dt);
    const Tensor v = uniform({2, 2, T, 3}, 73).to(dt);
    const Tensor whole = attn->forward(q, k, v, causal_mask());
    auto state = attn->new_state();
    REQUIRE(state);
    const double tol = dt == DType::F64 ? 1e-12 : 1e-5;
    double worst = 0;
    for (int64_t t = 0; t < T; ++t) {
      const Tensor y = attn->step(narrow(q, 2, t, 1), narrow(k, 2, t, 1), narrow(v, 2, t, 1), *state, causal_mask());
      state->length++;
      worst = std::max(worst, max_abs_diff(y, narrow(whole, 2, t, 1)));
    }
    CHECK(worst <= tol);
  }
}

TEST_CASE("performer: finite-difference gradient of q, k, v with ω fixed (f64)") {
  auto attn = make_performer(3, 7, "never");
  PerformerAttention* a = attn.get();
  const std::vector<Tensor> qkv{uniform({2, 2, 5, 3}, 81), uniform({2, 2, 5, 3}, 82), uniform({2, 2, 5, 4}, 83)};
  check_gradients([a](auto x) { return a->forward(x[0], x[1], x[2], {}); }, qkv);
  check_gradients([a](auto x) { return a->forward(x[0], x[1], x[2], causal_mask()); }, qkv);
  AttentionMask pad = causal_mask();
  pad.key_lengths = {3, 0};  // batch element 1 sees no key: zero output and gradient, no NaN
  check_gradients([a, pad](auto x) { return a->forward(x[0], x[1], x[2], pad); }, qkv);
  AttentionMask cross;
  cross.key_lengths = {6, 2};
  check_gradients([a, cross](auto x) { return a->forward(x[0], x[1], x[2], cross); },
                  {qkv[0], uniform({2, 2, 6, 3}, 84), uniform({2, 2, 6, 4}, 85)});
}

TEST_CASE("performer: f32 at head dim 64 stays finite and close to f64, with large inputs") {
  auto attn = make_performer(64, 256, "never");
  const Tensor q = uniform({1, 2, 80, 64}, 91, -3, 3), k = uniform({1, 2, 80, 64}, 92, -3, 3);
  const Tensor v = uniform({1, 2, 80, 8}, 93);
  for (bool causal : {false, true}) {
    AttentionMask m;
    m.causal = causal;
    const Tensor y64 = attn->forward(q, k, v, m);
    const Tensor q32 = q.to(DType::F32).set_requires_grad(true);
    const Tensor y32 = attn->forward(q32, k.to(DType::F32), v.to(DType::F32), m);
    y32.backward(ones(y32.shape()));
    bool finite = true;
    for (double x : q32.grad().to_vector()) finite = finite && std::isfinite(x);
    CAPTURE(causal);
    CHECK(finite);
    CHECK(max_abs_diff(y32, y64) < 3e-5);  // measured 3e-6
  }
}

TEST_CASE("performer: options, masks and state errors") {
  const Tensor q = uniform({1, 2, 4, 4}, 101), k = uniform({1, 2, 4, 4}, 102), v = uniform({1, 2, 4, 3}, 103);
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 4;
  auto def = make_attention("performer", cfg);
  CHECK(def->name() == "performer");
  CHECK(dynamic_cast<PerformerAttention&>(*def).projection().shape() == Shape{256, 4});
  CHECK(def->parameters().empty());  // ω is not trained
  auto bad = [](const char* key, const char* value) {
    AttentionConfig c;
    c.head_dim = 4;
    c.options.set(key, value);
    return make_attention("performer", c);
  };
  CHECK_THROWS_WITH(bad("redraw", "sometimes"), "attention 'performer': option redraw must be always, never or "
                                                "every:N, got 'sometimes'");
  CHECK_THROWS_WITH(bad("redraw", "every:0"),
                    "attention 'performer': option redraw every:N expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(bad("redraw", "every:2x"), "attention 'performer': option redraw every:N expects an integer >= 1, "
                                               "got '2x'");
  CHECK_THROWS_WITH(bad("features", "0"), "attention 'performer': option features expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(bad("scale", "1"), "attention 'performer': unknown option 'scale'");

  const std::string why = " (random features form no (query, key) logits, and their causal sums start at position "
                          "0); it takes: causal, non-causal, key padding, cross-attention";
  AttentionMask keep;
  keep.keep = ones({4, 4});
  CHECK_THROWS_WITH(def->forward(q, k, v, keep), ("attention 'performer': does not take a keep mask" + why).c_str());
  AttentionMask alibi = causal_mask();
  alibi.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  CHECK_THROWS_WITH(def->step(narrow(q, 2, 0, 1), narrow(k, 2, 0, 1), narrow(v, 2, 0, 1), *def->new_state(), alibi),
                    ("attention 'performer' step: does not take ALiBi slopes" + why).c_str());
  CHECK_THROWS_WITH(def->forward(uniform({1, 2, 4, 3}, 1), uniform({1, 2, 4, 3}, 2), v, {}),
                    "attention 'performer': q [1, 2, 4, 3] and k [1, 2, 4, 3] have head dim 3, the variant was built "
                    "for head_dim 4");
  CHECK_THROWS_WITH(def->step(uniform({1, 2, 1, 3}, 1), uniform({1, 2, 1, 3}, 2), narrow(v, 2, 0, 1),
                              *def->new_state(), {}),
                    "attention 'performer' step: q [1, 2, 1, 3] and k [1, 2, 1, 3] have head dim 3, the variant was "
                    "built for head_dim 4");
  AttentionMask late = causal_mask();
  late.query_offset = 2;
  CHECK_THROWS_WITH(def->forward(q, k, v, late), ("attention 'performer': does not take causal queries that continue a "
                                                  "sequence (query_offset 2, 4 queries, 4 keys; step() continues one)" +
                                                  why).c_str());
  AttentionMask lengths;
  lengths.key_lengths = {9};
  CHECK_THROWS_WITH(def->forward(q, k, v, lengths), "attention 'performer': key_lengths[0] = 9 is outside [0, 4]");

  // a state is tied to the draw of ω it was built with
  auto state = def->new_state();
  def->step(narrow(q, 2, 0, 1), narrow(k, 2, 0, 1), narrow(v, 2, 0, 1), *state, {});
  state->length++;
  CHECK_THROWS_WITH(def->step(q, k, v, *state, {}),
                    "attention 'performer' step: q, k and v must be one position [B, H, 1, D], got q [1, 2, 4, 4], k "
                    "[1, 2, 4, 4], v [1, 2, 4, 3]");
  def->forward(q, k, v, {});  // training mode, redraw=always: draw 0 for call 0
  def->forward(q, k, v, {});  // draw 1
  CHECK_THROWS_WITH(def->step(narrow(q, 2, 1, 1), narrow(k, 2, 1, 1), narrow(v, 2, 1, 1), *state, {}),
                    "attention 'performer' step: the state was built with draw 0 of the random features, now at "
                    "draw 1 (a training forward redrew them)");
  state->length = 3;
  CHECK_THROWS_WITH(def->step(narrow(q, 2, 1, 1), narrow(k, 2, 1, 1), narrow(v, 2, 1, 1), *state, {}),
                    "attention 'performer' step: state.length is 3 but the state holds 1 positions (advance length "
                    "by one after each step)");
}

TEST_CASE("performer: a checkpoint carries the redraw counter, so a loaded model uses the same features") {
  TransformerConfig c;
  c.vocab = 6;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 8;
  c.decoder_layers = 2;
  c.max_len = 8;
  c.attention = "performer";
  c.attention_options.set("features", "8");
  c.attention_options.set("redraw", "every:2");
  LanguageModel a(c), b(c);
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 5, 0, 1, 2}, {1, 8}, DType::I64);
  for (int i = 0; i < 5; ++i) a.forward(x);  // 5 training calls: draw 2
  const std::string path = "/tmp/eng_test_performer_" + std::to_string(::getpid()) + ".safetensors";
  save_checkpoint(path, a, nullptr, {});
  load_checkpoint(path, b, nullptr);
  std::remove(path.c_str());
  const auto& pa = dynamic_cast<const PerformerAttention&>(a.layers[1]->self_attn.mechanism());
  const auto& pb = dynamic_cast<const PerformerAttention&>(b.layers[1]->self_attn.mechanism());
  CHECK(pb.training_calls() == 5);
  a.eval();
  b.eval();
  NoGradGuard no_grad;
  CHECK(eng::test::max_abs_diff(a.forward(x), b.forward(x)) == 0.0);
  CHECK(pb.draw() == pa.draw());
  // Layers draw different features: each mechanism has its own seed.
  const auto& pa0 = dynamic_cast<const PerformerAttention&>(a.layers[0]->self_attn.mechanism());
  CHECK(eng::test::max_abs_diff(pa0.projection(), pa.projection()) > 0.1);
}
