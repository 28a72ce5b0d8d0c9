// The `synthesizer` variant (models/attention/synthesizer.h), both kinds: naive loops of the paper's formulas,
// keys unused, causal leakage, finite-difference gradients of q, v and the parameters, fixed R, and errors.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "models/attention/synthesizer.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::check_parameter_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

std::unique_ptr<Attention> make_synth(const std::string& kind, int64_t max_len = 8, bool fixed = false) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 3, cfg.max_len = max_len, cfg.seed = 4;
  cfg.options.set("kind", kind);
  if (fixed) cfg.options.set("fixed", "true");
  return make_attention("synthesizer", cfg);
}

SynthesizerAttention& synth(const std::unique_ptr<Attention>& a) { return dynamic_cast<SynthesizerAttention&>(*a); }

// Eq. 1–3 (dense) and Eq. 4 (random) by loops in double: per (b, h, i), logits B_ij for j < end (the keys the
// mask leaves), softmax over them, times v.
Tensor naive_synth(const SynthesizerAttention& s, const Tensor& q, const Tensor& v, const AttentionMask& mask,
                   int64_t Lk) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Dv = v.size(3);
  const bool dense = s.kind() == SynthesizerAttention::Kind::Dense;
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t end = attention_key_end(mask, b, i, Lk);
        std::vector<double> logit(static_cast<size_t>(Lk));
        std::vector<double> hidden(static_cast<size_t>(D));
        if (dense)
          for (int64_t e = 0; e < D; ++e) {
            double t = s.b1().at({h, 0, e});
            for (int64_t d = 0; d < D; ++d) t += q.at({b, h, i, d}) * s.w1().at({h, d, e});
            hidden[size_t(e)] = std::max(t, 0.0);
          }
        double mx = -std::numeric_limits<double>::infinity(), z = 0;
        for (int64_t j = 0; j < end; ++j) {
          double t = 0;
          if (dense) {
            t = s.b2().at({h, 0, j});
            for (int64_t e = 0; e < D; ++e) t += hidden[size_t(e)] * s.w2().at({h, e, j});
          } else {
            t = s.r().at({h, i + mask.query_offset, j});
          }
          logit[size_t(j)] = t;
          mx = std::max(mx, t);
        }
        for (int64_t j = 0; j < end; ++j) z += std::exp(logit[size_t(j)] - mx);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < end; ++j) acc += std::exp(logit[size_t(j)] - mx) / z * v.at({b, h, j, e});
          out.set_at({b, h, i, e}, acc);
        }
      }
  return out;
}

}  // namespace

TEST_CASE("synthesizer: both kinds == naive loops of Eq. 1-4 (f64, f32), keys unused, masks, Lq != Lk") {
  for (const char* kind : {"dense", "random"}) {
    CAPTURE(kind);
    auto a = make_synth(kind);
    CHECK(a->name() == "synthesizer");
    a->to(DType::F64);
    const Tensor q = uniform({2, 2, 5, 3}, 1, -2, 2), k = uniform({2, 2, 6, 3}, 2), v = uniform({2, 2, 6, 2}, 3);
    const Tensor y = a->forward(q, k, v, {});
    CHECK(max_abs_diff(y, naive_synth(synth(a), q, v, {}, 6)) < 1e-13);
    CHECK(max_abs_diff(a->forward(q, uniform({2, 2, 6, 3}, 9), v, {}), y) == 0);  // keys are never read
    AttentionMask m;
    m.key_lengths = {6, 3};
    CHECK(max_abs_diff(a->forward(q, k, v, m), naive_synth(synth(a), q, v, m, 6)) < 1e-13);
    m.causal = true;
    m.key_lengths = {};
    const Tensor kk = narrow(k, 2, 0, 5), vv = narrow(v, 2, 0, 5);
    CHECK(max_abs_diff(a->forward(q, kk, vv, m), naive_synth(synth(a), q, vv, m, 5)) < 1e-13);
    const Tensor y32 = a->forward(q.to(DType::F32), kk.to(DType::F32), vv.to(DType::F32), m);
    CHECK(y32.dtype() == DType::F32);
    CHECK(max_abs_diff(y32, naive_synth(synth(a), q, vv, m, 5)) < 1e-5);
  }
}

TEST_CASE("synthesizer: causal forms do not leak (future q, k, v leave earlier rows unchanged, zero gradient)") {
  for (const char* kind : {"dense", "random"}) {
    CAPTURE(kind);
    auto a = make_synth(kind);
    a->to(DType::F64);
    AttentionMask m;
    m.causal = true;
    std::vector<Tensor> x{uniform({2, 2, 7, 3}, 4), uniform({2, 2, 7, 3}, 5), uniform({2, 2, 7, 2}, 6)};
    const Tensor y = a->forward(x[0], x[1], x[2], m);
    const int64_t cut = 4;
    std::vector<Tensor> x2;
    for (size_t i = 0; i < 3; ++i) {
      Tensor t = x[i].clone();
      Tensor tail = narrow(t, 2, cut, 7 - cut);
      tail.copy_from(uniform(tail.shape(), 30 + i, -30, 30));
      t.set_requires_grad(true);
      x2.push_back(t);
    }
    const Tensor y2 = a->forward(x2[0], x2[1], x2[2], m);
    CHECK(max_abs_diff(narrow(y2, 2, 0, cut), narrow(y, 2, 0, cut)) == 0);
    sum(narrow(y2, 2, 0, cut)).backward();
    // k is unused, and so is q by the random kind: they get no gradient at all
    CHECK(!x2[1].grad().defined());
    CHECK(x2[0].grad().defined() == (std::string(kind) == "dense"));
    for (size_t i : {size_t(0), size_t(2)})
      if (x2[i].grad().defined())
        for (double g : narrow(x2[i].grad(), 2, cut, 7 - cut).to_vector()) CHECK(g == 0);
  }
}

TEST_CASE("synthesizer: finite-difference gradients of q, v and every parameter (f64); fixed R is a buffer") {
  for (const char* kind : {"dense", "random"}) {
    CAPTURE(kind);
    auto a = make_synth(kind, 5);
    a->to(DType::F64);
    Attention* p = a.get();
    AttentionMask m;
    m.causal = true;
    m.key_lengths = {5, 3};
    const Tensor k = uniform({2, 2, 5, 3}, 7);
    if (std::string(kind) == "dense")
      check_gradients([p, m, k](auto x) { return p->forward(x[0], k, x[1], m); },
                      {uniform({2, 2, 4, 3}, 8), uniform({2, 2, 5, 2}, 9)});
    else  // the random kind never reads q
      check_gradients([p, m, k](auto x) { return p->forward(uniform({2, 2, 4, 3}, 8), k, x[0], m); },
                      {uniform({2, 2, 5, 2}, 9)});
    const Tensor q = uniform({2, 2, 4, 3}, 10), v = uniform({2, 2, 5, 2}, 11);
    check_parameter_gradients(a->named_parameters(), [&] { return a->forward(q, k, v, m); });
  }
  auto dense = make_synth("dense");
  CHECK(dense->named_parameters().size() == 4);
  CHECK(synth(dense).w2().shape() == Shape{2, 3, 8});
  auto fixed = make_synth("random", 8, true);
  CHECK(fixed->named_parameters().empty());
  REQUIRE(fixed->named_buffers().size() == 1);
  CHECK(fixed->named_buffers()[0].first == "R");
  CHECK(fixed->named_buffers()[0].second.shape() == Shape{2, 8, 8});
  CHECK(make_synth("random")->named_parameters().size() == 1);
}

TEST_CASE("synthesizer: max_len, lengths beyond it, bad kinds and options are refused") {
  CHECK_THROWS_WITH(make_synth("dense", 0),
                    "attention 'synthesizer': needs max_len (the longest sequence: B and R have one column per key "
                    "position), got 0");
  CHECK_THROWS_WITH(make_synth("conv"), "attention 'synthesizer': option kind must be dense or random, got 'conv'");
  CHECK_THROWS_WITH(make_synth("dense", 8, true), "attention 'synthesizer': option fixed applies to kind=random only");
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 3, cfg.max_len = 8;
  cfg.options.set("factorized", "true");
  CHECK_THROWS_WITH(make_attention("synthesizer", cfg), "attention 'synthesizer': unknown option 'factorized'");
  auto a = make_synth("dense", 4);
  const Tensor q = uniform({1, 2, 3, 3}, 1).to(DType::F32), k = uniform({1, 2, 5, 3}, 2).to(DType::F32);
  const Tensor v = uniform({1, 2, 5, 2}, 3).to(DType::F32);
  CHECK_THROWS_WITH(a->forward(q, k, v, {}), "attention 'synthesizer': q [1, 2, 3, 3] (from position 0) and k "
                    "[1, 2, 5, 3] exceed max_len 4 (one synthesised logit per position up to max_len)");
  const Tensor q1 = uniform({1, 1, 3, 3}, 4).to(DType::F32);
  CHECK_THROWS_WITH(a->forward(q1, narrow(k, 1, 0, 1), narrow(v, 1, 0, 1), {}),
                    "attention 'synthesizer': built for 2 heads of dim 3, got q [1, 1, 3, 3]");
}
