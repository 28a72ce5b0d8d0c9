// The AFT family (models/attention/aft.h: aft-simple, aft-full, aft-local, aft-conv) against a naive double loop of
// Eq. 2, the equivalences between the variants, causality, gradients (inputs and parameters), stability for keys
// spread over [−60, 60] in f32, aft-simple's recurrent form, the kernel's own gradient check, and the errors.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/threadpool.h"
#include "models/attention/aft.h"
#include "models/transformer.h"
#include "ops/aft.h"
#include "ops/binary.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::check_parameter_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

constexpr int64_t kMaxLen = 8;
using Bias = std::function<double(int64_t h, int64_t t, int64_t t2)>;  // w_{t,t'} of head h

std::unique_ptr<AftAttention> make_aft(const std::string& name, std::map<std::string, std::string> opts = {},
                                       bool causal = false, int64_t max_len = kMaxLen) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 3, cfg.max_len = max_len, cfg.causal = causal, cfg.seed = 5;
  cfg.options = AttentionOptions(std::move(opts));
  auto a = make_attention(name, cfg);
  return std::unique_ptr<AftAttention>(dynamic_cast<AftAttention*>(a.release()));
}

Tensor param(const Attention& a, const std::string& name) {
  for (const auto& [n, p] : a.named_parameters())
    if (n == name) return p;
  FAIL("no parameter ", name);
  return Tensor();
}

// Gives every parameter of `a` values from fn(name, row, col) in place (after converting them to f64).
void set_params(Attention& a, const std::function<double(const std::string&, int64_t, int64_t)>& fn) {
  a.to(DType::F64);
  for (const auto& [n, p] : a.named_parameters())
    for (int64_t r = 0; r < p.size(0); ++r)
      for (int64_t c = 0; c < p.size(1); ++c) p.data<double>()[r * p.size(1) + c] = fn(n, r, c);
}

double rnd(const std::string& name, int64_t r, int64_t c) {  // deterministic values in about [−1, 1]
  return std::sin(1.7 * double(r) + 0.9 * double(c) + double(name.size()));
}

// Eq. 2 by loops in double: σ(q_t) Σ_{t'} exp(k_t' + w(h, t, t')) v_t' / Σ_{t'} exp(k_t' + w(h, t, t')) over the
// keys t' < length (causal: t' <= t); a row without keys is 0.
Tensor naive_aft(const Tensor& q, const Tensor& k, const Tensor& v, const Bias& w, bool causal,
                 const std::vector<int64_t>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), D = q.size(3);
  Tensor out = zeros({B, H, Lq, D}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < Lq; ++t)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t end = std::min(lengths.empty() ? Lk : lengths[size_t(b)], causal ? t + 1 : Lk);
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < end; ++j) mx = std::max(mx, k.at({b, h, j, d}) + w(h, t, j));
          double num = 0, den = 0;
          for (int64_t j = 0; j < end; ++j) {
            const double e = std::exp(k.at({b, h, j, d}) + w(h, t, j) - mx);
            num += e * v.at({b, h, j, d});
            den += e;
          }
          const double sig = 1 / (1 + std::exp(-q.at({b, h, t, d})));
          out.set_at({b, h, t, d}, end > 0 ? sig * num / den : 0.0);
        }
  return out;
}

// The w each variant implies, read from its parameters.
Bias bias_of(const AftAttention& a, bool causal) {
  const std::string n = a.name();
  if (n == "aft-simple") return [](int64_t, int64_t, int64_t) { return 0.0; };
  if (n == "aft-full") {
    if (dynamic_cast<const AftFull&>(a).factor() == 0) {
      const Tensor w = param(a, "w");
      return [w](int64_t, int64_t t, int64_t j) { return w.at({t, j}); };
    }
    const Tensor u = param(a, "u"), v = param(a, "v");
    return [u, v](int64_t, int64_t t, int64_t j) {
      double s = 0;
      for (int64_t r = 0; r < u.size(1); ++r) s += u.at({t, r}) * v.at({j, r});
      return s;
    };
  }
  if (n == "aft-local") {
    const Tensor w = param(a, "w");
    const int64_t s = dynamic_cast<const AftLocal&>(a).window();
    return [w, s](int64_t, int64_t t, int64_t j) { return std::abs(t - j) < s ? w.at({t, j - t + s - 1}) : 0.0; };
  }
  const Tensor w = param(a, "w");
  const auto [lo, hi] = dynamic_cast<const AftConv&>(a).offsets(causal);
  return [w, lo = lo, hi = hi](int64_t h, int64_t t, int64_t j) {
    return j - t >= lo && j - t <= hi ? w.at({h, j - t - lo}) : 0.0;
  };
}

struct Variant {
  std::string name;
  std::map<std::string, std::string> opts;
};
const std::vector<Variant> kVariants{{"aft-simple", {}},
                                     {"aft-full", {}},
                                     {"aft-full", {{"factor", "2"}}},
                                     {"aft-local", {{"window", "2"}}},
                                     {"aft-conv", {{"window", "3"}}},
                                     {"aft-conv", {{"window", "4"}}}};

const std::vector<std::vector<int64_t>> kPaddings{{}, {4, 0}, {6, 3}};  // none, an element without keys, some

// Inputs [2, 2, T, 3] whose padded keys and values (beyond `lengths`) hold ±1e9: they must not matter.
std::vector<Tensor> inputs(int64_t T, uint64_t seed, const std::vector<int64_t>& lengths, double lo = -2,
                           double hi = 2) {
  Tensor q = uniform({2, 2, T, 3}, seed, -2, 2), k = uniform({2, 2, T, 3}, seed + 1, lo, hi),
         v = uniform({2, 2, T, 3}, seed + 2);
  for (int64_t b = 0; b < 2 && !lengths.empty(); ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t j = lengths[size_t(b)]; j < T; ++j)
        for (int64_t d = 0; d < 3; ++d) k.set_at({b, h, j, d}, 1e9), v.set_at({b, h, j, d}, -1e9);
  return {q, k, v};
}

}  // namespace

TEST_CASE("aft: every variant == a naive loop of Eq. 2 (f64 and f32), causal and not, with key padding") {
  for (const Variant& var : kVariants)
    for (int mode = 0; mode < 3; ++mode) {  // 0: not causal, 1: causal by the mask, 2: causal by the config
      CAPTURE(var.name);
      CAPTURE(mode);
      auto a = make_aft(var.name, var.opts, mode == 2);
      set_params(*a, rnd);
      const bool causal = mode > 0;
      AttentionMask m;
      m.causal = mode == 1;
      for (const std::vector<int64_t>& lengths : kPaddings) {
        m.key_lengths = lengths;
        const auto x = inputs(6, 10, lengths);
        const Tensor ref = naive_aft(x[0], x[1], x[2], bias_of(*a, causal), causal, lengths);
        CHECK(max_abs_diff(a->forward(x[0], x[1], x[2], m), ref) < 1e-12);
        const Tensor y32 = a->forward(x[0].to(DType::F32), x[1].to(DType::F32), x[2].to(DType::F32), m);
        CHECK(y32.dtype() == DType::F32);
        CHECK(max_abs_diff(y32, ref) < 1e-5);
      }
    }
  // aft-simple, not causal, also serves cross-attention (Lq != Lk)
  auto simple = make_aft("aft-simple");
  const Tensor q = uniform({2, 2, 3, 3}, 1), k = uniform({2, 2, 5, 3}, 2), v = uniform({2, 2, 5, 3}, 3);
  AttentionMask m;
  m.key_lengths = std::vector<int64_t>{5, 2};
  CHECK(max_abs_diff(simple->forward(q, k, v, m), naive_aft(q, k, v, bias_of(*simple, false), false, {5, 2})) < 1e-13);
}

TEST_CASE("aft: full with w = 0 == simple; local with s >= T == full; conv laid out as w == full; u vᵀ == full") {
  const auto x = inputs(6, 20, {5, 6});
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    AttentionMask m;
    m.causal = causal, m.key_lengths = std::vector<int64_t>{5, 6};
    auto simple = make_aft("aft-simple"), full = make_aft("aft-full");
    set_params(*full, [](const std::string&, int64_t, int64_t) { return 0.0; });
    CHECK(max_abs_diff(full->forward(x[0], x[1], x[2], m), simple->forward(x[0], x[1], x[2], m)) < 1e-14);

    auto local = make_aft("aft-local", {{"window", "7"}});  // s = 7 >= T = 6: the band covers every pair
    set_params(*local, rnd);
    const Tensor band = param(*local, "w");
    set_params(*full, [&](const std::string&, int64_t t, int64_t j) { return t < 6 && j < 6 ? band.at({t, j - t + 6}) : 9.0; });
    CHECK(max_abs_diff(local->forward(x[0], x[1], x[2], m), full->forward(x[0], x[1], x[2], m)) < 1e-13);

    auto conv = make_aft("aft-conv", {{"window", "3"}});
    set_params(*conv, [](const std::string&, int64_t, int64_t c) { return 0.3 * double(c) - 0.4; });  // same per head
    const auto [lo, hi] = dynamic_cast<AftConv&>(*conv).offsets(causal);
    set_params(*full, [lo = lo, hi = hi](const std::string&, int64_t t, int64_t j) {
      return j - t >= lo && j - t <= hi ? 0.3 * double(j - t - lo) - 0.4 : 0.0;
    });
    CHECK(max_abs_diff(conv->forward(x[0], x[1], x[2], m), full->forward(x[0], x[1], x[2], m)) < 1e-13);

    auto factored = make_aft("aft-full", {{"factor", "2"}});
    set_params(*factored, rnd);
    const Bias uv = bias_of(*factored, causal);
    set_params(*full, [&](const std::string&, int64_t t, int64_t j) { return uv(0, t, j); });
    CHECK(max_abs_diff(factored->forward(x[0], x[1], x[2], m), full->forward(x[0], x[1], x[2], m)) < 1e-13);
  }
}

TEST_CASE("aft: causal variants do not leak: future k, v, q leave earlier rows bitwise unchanged, zero gradient") {
  for (const Variant& var : kVariants)
    for (DType dt : {DType::F64, DType::F32}) {
      CAPTURE(var.name);
      auto a = make_aft(var.name, var.opts, true);
      set_params(*a, rnd);
      a->to(dt);
      auto x = inputs(7, 30, {});
      for (Tensor& t : x) t = t.to(dt);
      const Tensor y = a->forward(x[0], x[1], x[2], {});
      const int64_t cut = 4;  // rows 0..3 must not see positions 4..6
      std::vector<Tensor> x2;
      for (size_t i = 0; i < 3; ++i) {
        Tensor t = x[i].clone();
        Tensor tail = narrow(t, 2, cut, 7 - cut);
        tail.copy_from(uniform(tail.shape(), 40 + i, -30, 30).to(dt));
        t.set_requires_grad(true);
        x2.push_back(t);
      }
      const Tensor y2 = a->forward(x2[0], x2[1], x2[2], {});
      CHECK(max_abs_diff(narrow(y2, 2, 0, cut), narrow(y, 2, 0, cut)) == 0);
      sum(narrow(y2, 2, 0, cut)).backward();
      for (const Tensor& t : x2)
        for (double g : narrow(t.grad(), 2, cut, 7 - cut).to_vector()) CHECK(g == 0);
    }
}

TEST_CASE("aft: finite-difference gradients of q, k, v and of the parameters (f64), causal and not, padded") {
  for (const Variant& var : kVariants)
    for (bool causal : {false, true}) {
      CAPTURE(var.name);
      CAPTURE(causal);
      auto a = make_aft(var.name, var.opts);
      set_params(*a, rnd);
      AttentionMask m;
      m.causal = causal, m.key_lengths = std::vector<int64_t>{5, 3};
      Attention* p = a.get();
      const auto x = inputs(5, 50, {});
      check_gradients([p, m](auto in) { return p->forward(in[0], in[1], in[2], m); }, x);
      const auto in = inputs(5, 60, m.key_lengths);
      if (var.name != "aft-simple")  // the one variant without parameters
        check_parameter_gradients(a->named_parameters(), [&] { return a->forward(in[0], in[1], in[2], m); });
    }
}

TEST_CASE("aft: keys spread over [-60, 60] in f32, the large ones late, give finite outputs matching double") {
  for (const Variant& var : kVariants)
    for (bool causal : {false, true}) {
      CAPTURE(var.name);
      CAPTURE(causal);
      auto a = make_aft(var.name, var.opts);
      set_params(*a, [](const std::string& n, int64_t r, int64_t c) { return 0.5 * rnd(n, r, c); });
      Tensor q = uniform({2, 2, 8, 3}, 70, -2, 2), k = uniform({2, 2, 8, 3}, 71, -60, -50),
             v = uniform({2, 2, 8, 3}, 72);
      narrow(k, 2, 5, 3).copy_from(uniform({2, 2, 3, 3}, 73, 50, 60));  // a global maximum underflows rows 0..4
      narrow(k, 2, 2, 1).copy_from(uniform({2, 2, 1, 3}, 74, -60, 60));
      AttentionMask m;
      m.causal = causal, m.key_lengths = std::vector<int64_t>{8, 6};
      const Tensor y = a->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m);
      for (double x : y.to_vector()) CHECK(std::isfinite(x));
      // the reference reads the f32-rounded inputs
      const Tensor q32 = q.to(DType::F32).to(DType::F64), k32 = k.to(DType::F32).to(DType::F64),
                   v32 = v.to(DType::F32).to(DType::F64);
      CHECK(max_abs_diff(y, naive_aft(q32, k32, v32, bias_of(*a, causal), causal, m.key_lengths)) < 1e-5);
      // the gradient stays finite too
      Tensor k2 = k.clone();
      k2.set_requires_grad(true);
      a->forward(q, k2, v, m).backward(ones({2, 2, 8, 3}, DType::F64));
      for (double g : k2.grad().to_vector()) CHECK(std::isfinite(g));
    }
}

TEST_CASE("aft-simple: step() equals the causal parallel form's rows, bitwise, in f32 and f64") {
  for (DType dt : {DType::F64, DType::F32}) {
    auto a = make_aft("aft-simple", {}, true);
    const Tensor q = uniform({2, 2, 7, 3}, 80, -2, 2).to(dt), v = uniform({2, 2, 7, 3}, 82).to(dt);
    Tensor k = uniform({2, 2, 7, 3}, 81, -60, 60).to(dt);
    const Tensor y = a->forward(q, k, v, {});
    auto st = a->new_state();
    REQUIRE(st != nullptr);
    for (int64_t t = 0; t < 7; ++t) {
      const Tensor yt = a->step(narrow(q, 2, t, 1), narrow(k, 2, t, 1), narrow(v, 2, t, 1), *st, {});
      CHECK(yt.dtype() == dt);
      CHECK(max_abs_diff(yt, narrow(y, 2, t, 1)) == 0);
      st->length++;
    }
    st->length = 6;  // a caller that forgot to advance
    CHECK_THROWS_WITH(a->step(narrow(q, 2, 0, 1), narrow(k, 2, 0, 1), narrow(v, 2, 0, 1), *st, {}),
                      "attention 'aft-simple' step: state.length is 6 but the state holds 7 positions (advance length "
                      "by one after each step)");
  }
  // Their steps: tests/test_attention_recurrent_forms.cpp.
  for (const char* n : {"aft-full", "aft-local", "aft-conv"}) CHECK(make_aft(n)->new_state() != nullptr);
}

TEST_CASE("aft_weighted: outputs and gradients are bitwise the same on 1 and 3 threads") {
  const Tensor k = uniform({2, 3, 9, 4}, 94, -4, 4), v = uniform({2, 3, 9, 4}, 95), w = uniform({9, 5}, 96);
  const Tensor g = uniform({2, 3, 9, 4}, 97);
  const int saved = num_threads();
  for (bool causal : {false, true}) {
    std::vector<std::vector<double>> runs;
    for (int threads : {1, 3}) {
      set_num_threads(threads);
      const Tensor kk = k.detach().set_requires_grad(true), vv = v.detach().set_requires_grad(true);
      const Tensor ww = w.detach().set_requires_grad(true);
      const Tensor y = aft_weighted(kk, vv, ww, {causal, {9, 6}, -2, 2, false});
      sum(mul(y, g)).backward();
      std::vector<double> all = y.to_vector();
      for (const Tensor* t : {&kk, &vv, &ww})
        for (double x : t->grad().to_vector()) all.push_back(x);
      runs.push_back(all);
    }
    CHECK(runs[0] == runs[1]);
  }
  set_num_threads(saved);
}

GRADCHECK("aft_weighted") {
  const Tensor k = uniform({2, 2, 5, 3}, 90, -3, 3), v = uniform({2, 2, 5, 3}, 91);
  for (bool causal : {false, true}) {
    // no band (aft-simple), a per-position band (aft-local), a per-head kernel (aft-conv)
    check_gradients([causal](auto x) { return aft_weighted(x[0], x[1], Tensor(), {causal, {5, 2}, 0, -1, false}); },
                    {k, v});
    check_gradients([causal](auto x) { return aft_weighted(x[0], x[1], x[2], {causal, {4, 0}, -2, 1, false}); },
                    {k, v, uniform({6, 4}, 92)});
    check_gradients([causal](auto x) { return aft_weighted(x[0], x[1], x[2], {causal, {}, -1, 0, true}); },
                    {k, v, uniform({2, 2}, 93)});
  }
}

TEST_CASE("aft: parameters are registered, sized by max_len, window and heads; they start at w = 0") {
  auto full = make_aft("aft-full");
  CHECK(param(*full, "w").shape() == Shape{kMaxLen, kMaxLen});
  auto fac = make_aft("aft-full", {{"factor", "3"}});
  CHECK(param(*fac, "u").shape() == Shape{kMaxLen, 3});
  CHECK(param(*fac, "v").shape() == Shape{kMaxLen, 3});
  auto local = make_aft("aft-local", {{"window", "3"}});
  CHECK(param(*local, "w").shape() == Shape{kMaxLen, 5});
  auto conv = make_aft("aft-conv", {{"window", "4"}}, false, 0);  // no max_len needed
  CHECK(param(*conv, "w").shape() == Shape{2, 4});
  CHECK(make_aft("aft-simple")->named_parameters().empty());
  // at initialisation every variant is aft-simple
  const auto x = inputs(6, 100, {});
  const Tensor ref = make_aft("aft-simple")->forward(x[0], x[1], x[2], {});
  for (auto* a : {full.get(), fac.get(), local.get(), conv.get()})
    CHECK(max_abs_diff(a->forward(x[0], x[1], x[2], {}), ref) < 1e-6);
}

TEST_CASE("aft: bad options, lengths, shapes and masks are refused with clear errors") {
  CHECK_THROWS_WITH(make_aft("aft-simple", {{"window", "3"}}), "attention 'aft-simple': unknown option 'window'");
  CHECK_THROWS_WITH(make_aft("aft-full", {{"window", "3"}}), "attention 'aft-full': unknown option 'window'");
  CHECK_THROWS_WITH(make_aft("aft-conv", {{"factor", "3"}}), "attention 'aft-conv': unknown option 'factor'");
  CHECK_THROWS_WITH(make_aft("aft-local", {{"window", "0"}}),
                    "attention 'aft-local': option window expects an integer in 1..8, got '0'");
  CHECK_THROWS_WITH(make_aft("aft-local", {{"window", "9"}}),
                    "attention 'aft-local': option window expects an integer in 1..8, got '9'");
  CHECK_THROWS_WITH(make_aft("aft-local", {{"window", "two"}}), "attention 'aft-local': option window expects an "
                                                                "integer in 1..8, got 'two'");
  CHECK_THROWS_WITH(make_aft("aft-conv", {{"window", "-1"}}), "attention 'aft-conv': option window expects an integer "
                                                              ">= 1, got '-1'");
  CHECK_THROWS_WITH(make_aft("aft-full", {{"factor", "-2"}}),
                    "attention 'aft-full': option factor expects an integer >= 0, got '-2'");
  CHECK_THROWS_WITH(make_aft("aft-full", {}, false, 0),
                    "attention 'aft-full': needs AttentionConfig::max_len >= 1 (w is max_len x max_len), got 0");
  CHECK_THROWS_WITH(make_aft("aft-local", {{"window", "2"}}, false, 0),
                    "attention 'aft-local': needs AttentionConfig::max_len >= 1 (w has a row per position), got 0");

  const auto x = inputs(9, 110, {});
  CHECK_THROWS_WITH(make_aft("aft-full")->forward(x[0], x[1], x[2], {}),
                    "attention 'aft-full': sequence length 9 exceeds max_len 8 (w is sized by AttentionConfig::max_len)");
  CHECK_THROWS_WITH(make_aft("aft-local")->forward(x[0], x[1], x[2], {}),
                    "attention 'aft-local': sequence length 9 exceeds max_len 8 (w is sized by AttentionConfig::max_len)");

  const Tensor q = uniform({1, 2, 3, 3}, 120), k = uniform({1, 2, 4, 3}, 121), v = uniform({1, 2, 4, 3}, 122);
  CHECK_THROWS_WITH(make_aft("aft-conv")->forward(q, k, v, {}),
                    "attention 'aft-conv': does not take cross-attention (3 queries, 4 keys) (keep, bias and ALiBi act "
                    "on (query, key) logits, which AFT never forms); it takes: causal, non-causal, key padding");
  AttentionMask causal;
  causal.causal = true;
  CHECK_THROWS_WITH(make_aft("aft-simple")->forward(q, k, v, causal),
                    "attention 'aft-simple': does not take causal queries that continue a sequence (query_offset 0, 3 "
                    "queries, 4 keys; step() continues one) (keep, bias and ALiBi act on (query, key) logits, which "
                    "AFT never forms); it takes: causal, non-causal, key padding, cross-attention");
  CHECK_THROWS_WITH(make_aft("aft-simple")->forward(q, k, uniform({1, 2, 4, 2}, 123), {}),
                    "attention 'aft-simple': AFT is elementwise over the head dim, so v needs q's head dim, got q "
                    "[1, 2, 3, 3], v [1, 2, 4, 2]");
  const Tensor q1 = uniform({1, 3, 4, 3}, 124), k1 = uniform({1, 3, 4, 3}, 125);
  CHECK_THROWS_WITH(make_aft("aft-conv")->forward(q1, k1, k1, {}),
                    "attention 'aft-conv': k [1, 3, 4, 3] has 3 heads, the variant was built for 2 (one kernel per "
                    "head)");

  const std::string why =
      " (keep, bias and ALiBi act on (query, key) logits, which AFT never forms); it takes: causal, non-causal, key "
      "padding";
  AttentionMask keep, bias, alibi, lengths;
  keep.keep = ones({4, 4});
  bias.bias = zeros({4, 4}, DType::F64);
  alibi.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  lengths.key_lengths = std::vector<int64_t>{5};
  for (const auto& var : kVariants) {
    auto a = make_aft(var.name, var.opts);
    const std::string cross = var.name == "aft-simple" ? ", cross-attention" : "";
    const std::string refused = "attention '" + var.name + "': does not take ";
    CHECK_THROWS_WITH(a->forward(k, k, v, keep), (refused + "a keep mask" + why + cross).c_str());
    CHECK_THROWS_WITH(a->forward(k, k, v, bias), (refused + "a bias" + why + cross).c_str());
    CHECK_THROWS_WITH(a->forward(k, k, v, alibi), (refused + "ALiBi slopes" + why + cross).c_str());
    CHECK_THROWS_WITH(a->forward(k, k, v, lengths),
                      ("attention '" + var.name + "': key_lengths[0] = 5 is outside [0, 4]").c_str());
  }
  auto simple = make_aft("aft-simple", {}, true);
  auto st = simple->new_state();
  CHECK_THROWS_WITH(simple->step(narrow(k, 2, 0, 1), narrow(k, 2, 0, 1), narrow(v, 2, 0, 1), *st, keep),
                    "attention 'aft-simple' step: does not take a keep mask (keep, bias and ALiBi act on (query, key) "
                    "logits, which AFT never forms); it takes: causal, non-causal, key padding, cross-attention");
  CHECK_THROWS_WITH(simple->step(k, k, v, *st, {}),
                    "attention 'aft-simple' step: q, k and v must be one position [B, H, 1, D], got q [1, 2, 4, 3], k "
                    "[1, 2, 4, 3], v [1, 2, 4, 3]");
  CHECK_THROWS_WITH(make_aft("aft-full")->step(narrow(k, 2, 0, 1), narrow(k, 2, 0, 1), narrow(v, 2, 0, 1), *st, {}),
                    "attention 'aft-full' step: the state was not made by this variant's new_state()");
}

TEST_CASE("aft: in a causal language model, every variant trains its w and generates with step()") {
  TransformerConfig c;
  c.vocab = 6, c.d_model = 8, c.heads = 2, c.d_ff = 8, c.decoder_layers = 2, c.max_len = 8;
  const Tensor ids = from_vector(std::vector<double>{1, 2, 3, 4, 5, 0, 1, 2}, {1, 8}, DType::I64);
  for (const char* name : {"aft-simple", "aft-full", "aft-local", "aft-conv"}) {
    CAPTURE(name);
    c.attention = name;
    LanguageModel lm(c);
    const Tensor logits = lm.forward(ids);
    sum(logits).backward();
    int found = 0;
    for (const auto& [n, p] : lm.named_parameters())
      if (n.find("attention.w") != std::string::npos) {
        ++found;
        REQUIRE(p.grad().defined());
        double norm = 0;
        for (double g : p.grad().to_vector()) norm += std::abs(g);
        CHECK(norm > 0);  // w = 0 at initialisation, yet it gets a gradient
      }
    CHECK(found == (std::string(name) == "aft-simple" ? 0 : 2));
    NoGradGuard no_grad;
    auto st = lm.new_state();
    for (int64_t t = 0; t < 8; ++t) {
      const Tensor row = lm.step(reshape(narrow(ids, 1, t, 1), {1}), st);
      CHECK(max_abs_diff(row, reshape(narrow(logits, 1, t, 1), {1, 6})) < 1e-5);
    }
  }
}
