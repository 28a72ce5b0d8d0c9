#include "ops/ctc_loss.h"

#include <cmath>
#include <limits>

#include "engine/optim.h"
#include "ops/ctc_decode.h"
#include "ops/softmax.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

Tensor ids(const std::vector<double>& v, const Shape& shape) { return from_vector(v, shape, DType::I64); }

// The collapse rule itself: merge repeats, then drop blanks.
std::vector<int64_t> collapse(const std::vector<int64_t>& path, int64_t blank) {
  std::vector<int64_t> out;
  int64_t prev = -1;
  for (int64_t k : path) {
    if (k != blank && k != prev) out.push_back(k);
    prev = k;
  }
  return out;
}

// By enumeration of all C^T frame paths of one sequence (x = [T, C] log-probabilities): p(target), and
// for each (t, k) the summed probability of the paths that collapse to the target and emit k at t.
struct Brute {
  double p = 0;
  std::vector<double> through;  // [T, C]
};

Brute brute_force(const std::vector<double>& x, int64_t T, int64_t C, const std::vector<int64_t>& target,
                  int64_t blank) {
  Brute r;
  r.through.assign(size_t(T * C), 0.0);
  std::vector<int64_t> path(size_t(T), 0);
  int64_t paths = 1;
  for (int64_t t = 0; t < T; ++t) paths *= C;
  for (int64_t code = 0; code < paths; ++code) {
    double logp = 0;
    for (int64_t t = 0, c = code; t < T; ++t, c /= C) {
      path[size_t(t)] = c % C;
      logp += x[size_t(t * C + c % C)];
    }
    if (collapse(path, blank) != target) continue;
    r.p += std::exp(logp);
    for (int64_t t = 0; t < T; ++t) r.through[size_t(t * C + path[size_t(t)])] += std::exp(logp);
  }
  return r;
}

// Normalised log-probabilities [B, T, C] from random logits.
Tensor random_log_probs(const Shape& shape, uint64_t seed) { return log_softmax(uniform(shape, seed, -2, 2), -1); }

}  // namespace

GRADCHECK("ctc_loss") {
  // Raw scores, not normalised: the loss and its gradient are defined for any reals. Row 0 has a repeated
  // label (it needs a blank between), row 1 reads 4 of the 6 frames, row 2 has an empty target.
  const Tensor targets = ids({1, 1, 2, 3, 2, 0, 0, 0, 0}, {3, 3});
  const std::vector<int64_t> in_len = {6, 4, 5}, tgt_len = {3, 2, 0};
  for (CTCReduction r : {CTCReduction::Mean, CTCReduction::Sum, CTCReduction::None}) {
    CTCLossOptions opt;
    opt.reduction = r;
    check_gradients([&](auto v) { return ctc_loss(v[0], v[1], in_len, tgt_len, opt); },
                    {uniform({3, 6, 4}, 7, -3, 0)}, {}, {targets});
  }
  // blank as the last class; an impossible row (label 1 twice in 2 frames needs 3) under zero_infinity
  CTCLossOptions last;
  last.blank = 3;
  last.zero_infinity = true;
  check_gradients([&](auto v) { return ctc_loss(v[0], v[1], {5, 2}, {2, 2}, last); },
                  {uniform({2, 5, 4}, 8, -3, 0)}, {}, {ids({0, 2, 1, 1}, {2, 2})});
  // through log_softmax, from logits (the composition a model uses)
  check_gradients([&](auto v) { return ctc_loss(log_softmax(v[0], -1), v[1], {4}, {2}); }, {uniform({1, 4, 3}, 9)},
                  {}, {ids({2, 1}, {1, 2})});
}

TEST_CASE("ctc_loss: loss and gradient equal the enumeration of all alignments") {
  const int64_t T = 5, C = 3;
  struct Case {
    std::vector<int64_t> target;
    int64_t blank, frames;
  };
  // a repeat (needs a blank between), distinct labels, one label, the empty target, fewer frames,
  // a non-zero blank, and a target too long for its frames (p = 0)
  const std::vector<Case> cases = {{{1, 1}, 0, 5}, {{1, 2}, 0, 5}, {{2}, 0, 5},    {{}, 0, 5},
                                   {{2, 1}, 0, 3}, {{0, 0}, 1, 5}, {{1, 2, 1}, 0, 5}, {{1, 1, 1}, 0, 4}};
  uint64_t seed = 20;
  for (const Case& c : cases) {
    CAPTURE(seed);
    Tensor x = random_log_probs({1, T, C}, seed++).detach();
    x.set_requires_grad(true);
    std::vector<double> padded(c.target.begin(), c.target.end());
    padded.resize(3, 0.0);
    CTCLossOptions opt;
    opt.blank = c.blank;
    opt.reduction = CTCReduction::Sum;
    Tensor loss = ctc_loss(x, ids(padded, {1, 3}), {c.frames}, {int64_t(c.target.size())}, opt);
    std::vector<double> xv = x.to_vector();
    xv.resize(size_t(c.frames * C));  // the frames the sequence reads
    const Brute want = brute_force(xv, c.frames, C, c.target, c.blank);
    if (want.p == 0) {
      CHECK(std::isinf(loss.item()));
      continue;
    }
    CHECK(loss.item() == doctest::Approx(-std::log(want.p)).epsilon(1e-12));
    loss.backward();
    const std::vector<double> g = x.grad().to_vector();
    for (int64_t i = 0; i < T * C; ++i) {
      const double expect = i < c.frames * C ? -want.through[size_t(i)] / want.p : 0.0;
      CHECK(g[size_t(i)] == doctest::Approx(expect).epsilon(1e-10));
    }
  }
}

TEST_CASE("ctc_loss: every frame's gradient sums to -1, so through log_softmax it is softmax - occupancy") {
  // Each alignment emits exactly one class per frame, so the occupancies of a frame sum to p.
  Tensor logits = uniform({2, 7, 5}, 3, -2, 2);
  logits.set_requires_grad(true);
  Tensor lp = log_softmax(logits, -1);
  const std::vector<int64_t> in_len = {7, 5};
  Tensor out = ctc_loss(lp, ids({1, 3, 3, 2, 4, 0}, {2, 3}), in_len, {3, 2}, {0, CTCReduction::Sum, false});
  out.backward();
  const std::vector<double> g = logits.grad().to_vector();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 7; ++t) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < 5; ++k) {
        s += g[size_t((b * 7 + t) * 5 + k)];
        a += std::abs(g[size_t((b * 7 + t) * 5 + k)]);
      }
      CHECK(s == doctest::Approx(0.0).epsilon(1e-12).scale(1));  // softmax sums to 1, occupancy to 1
      if (t >= in_len[size_t(b)]) CHECK(a == 0);                 // frames past the input length
    }
}

TEST_CASE("ctc_loss: reductions, f32, and impossible alignments") {
  Tensor x = random_log_probs({3, 4, 3}, 40);
  const Tensor targets = ids({1, 2, 1, 1, 2, 0}, {3, 2});
  // row 1 needs three frames for [1, 1] and has two: impossible
  const std::vector<int64_t> in_len = {4, 2, 3}, tgt_len = {2, 2, 1};
  Tensor none = ctc_loss(x, targets, in_len, tgt_len, {0, CTCReduction::None, false});
  REQUIRE(none.shape() == Shape{3});
  CHECK(std::isinf(none.at({1})));
  CHECK(std::isinf(ctc_loss(x, targets, in_len, tgt_len).item()));
  Tensor zeroed = ctc_loss(x, targets, in_len, tgt_len, {0, CTCReduction::None, true});
  CHECK(zeroed.at({1}) == 0);
  CHECK(zeroed.at({0}) == none.at({0}));
  const double sum = none.at({0}) + none.at({2});
  CHECK(ctc_loss(x, targets, in_len, tgt_len, {0, CTCReduction::Sum, true}).item() == doctest::Approx(sum));
  CHECK(ctc_loss(x, targets, in_len, tgt_len, {0, CTCReduction::Mean, true}).item() == doctest::Approx(sum / 3));

  // the impossible row gets no gradient (and no NaN) even without zero_infinity
  Tensor leaf = x.detach();
  leaf.set_requires_grad(true);
  ctc_loss(leaf, targets, in_len, tgt_len, {0, CTCReduction::Sum, false}).backward();
  for (double v : leaf.grad().to_vector()) CHECK(std::isfinite(v));
  for (int64_t i = 0; i < 12; ++i) CHECK(leaf.grad().to_vector()[size_t(12 + i)] == 0);

  Tensor y32 = ctc_loss(x.to(DType::F32), targets, in_len, tgt_len, {0, CTCReduction::None, true});
  CHECK(y32.dtype() == DType::F32);
  CHECK(eng::test::allclose(y32.to(DType::F64), zeroed, 1e-5, 1e-6));
  // no input frames: the empty target has probability 1, any other 0
  Tensor empty_in = ctc_loss(x, targets, {0, 0, 0}, {0, 1, 1}, {0, CTCReduction::None, false});
  CHECK(empty_in.at({0}) == 0);
  CHECK(std::isinf(empty_in.at({1})));
}

TEST_CASE("ctc_loss: gradient descent on free scores learns the target, and greedy decoding reads it") {
  Tensor logits = zeros({1, 12, 5}, DType::F32);
  logits.set_requires_grad(true);
  SGD opt({{"logits", logits}}, 1.0);
  const Tensor target = ids({3, 3, 1, 4}, {1, 4});
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss = ctc_loss(log_softmax(logits, -1), target, {12}, {4});
    if (step == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    opt.step();
  }
  CHECK(last < 0.05 * first);
  const LabelSeqs decoded = ctc_greedy_decode(logits, {12});
  CHECK(decoded[0] == std::vector<int64_t>{3, 3, 1, 4});
}

TEST_CASE("ctc_loss: errors name the op, the argument and the shapes") {
  Tensor x = zeros({2, 4, 3});
  Tensor t = ids({1, 2, 1, 0}, {2, 2});
  CHECK_THROWS_WITH(ctc_loss(zeros({4, 3}), t, {4, 4}, {2, 1}),
                    "ctc_loss: log_probs must be f32 or f64 [B, T, C], got f32 [4, 3]");
  CHECK_THROWS_WITH(ctc_loss(x, ids({1, 2}, {2}), {4, 4}, {1, 1}),
                    "ctc_loss: targets must be i64 [B, S] with B = 2 (log_probs [2, 4, 3]), got i64 [2]");
  CHECK_THROWS_WITH(ctc_loss(x, t, {4, 5}, {2, 1}),
                    "ctc_loss: input_lengths[1] = 5 is outside [0, 4] for log_probs [2, 4, 3]");
  CHECK_THROWS_WITH(ctc_loss(x, t, {4, 4}, {2, 3}),
                    "ctc_loss: target_lengths[1] = 3 is outside [0, 2] for targets [2, 2]");
  CHECK_THROWS_WITH(ctc_loss(x, t, {4, 4}, {2, 2}),
                    "ctc_loss: targets[1, 1] = 0 is not a label in [0, 3) other than the blank 0");
  CHECK_THROWS_WITH(ctc_loss(x, ids({1, 3, 1, 0}, {2, 2}), {4, 4}, {2, 1}),
                    "ctc_loss: targets[0, 1] = 3 is not a label in [0, 3) other than the blank 0");
  CHECK_THROWS_WITH(ctc_loss(x, t, {4}, {2, 1}), "ctc_loss: 1 input lengths and 2 target lengths for a batch of 2");
  CHECK_THROWS_WITH(ctc_loss(x, t, {4, 4}, {2, 1}, {3, CTCReduction::Mean, false}),
                    "ctc_loss: blank 3 out of range [0, 3) for log_probs [2, 4, 3]");
}

TEST_CASE("ctc decoding: greedy collapse, edit distance, label error rate") {
  // frames' argmax: 1 1 0 1 2 2 0 | 0 2 ; blank 0
  const std::vector<double> best = {1, 1, 0, 1, 2, 2, 0, 0, 2};
  std::vector<double> scores(9 * 3, 0.0);
  for (size_t i = 0; i < best.size(); ++i) scores[i * 3 + size_t(best[i])] = 1.0;
  Tensor s = from_vector(scores, {1, 9, 3});
  CHECK(ctc_greedy_decode(s, {9})[0] == std::vector<int64_t>{1, 1, 2, 2});
  CHECK(ctc_greedy_decode(s, {7})[0] == std::vector<int64_t>{1, 1, 2});
  CHECK(ctc_greedy_decode(s, {0})[0].empty());
  CHECK(ctc_greedy_decode(s, {9}, 1)[0] == std::vector<int64_t>{0, 2, 0, 2});  // blank 1 instead

  CHECK(edit_distance({}, {}) == 0);
  CHECK(edit_distance({1, 2, 3}, {}) == 3);
  CHECK(edit_distance({}, {4, 5}) == 2);
  CHECK(edit_distance({1, 2, 3}, {1, 3}) == 1);     // a deletion
  CHECK(edit_distance({1, 2, 3}, {1, 4, 3}) == 1);  // a substitution
  CHECK(edit_distance({3, 1, 2}, {1, 2, 3}) == 2);  // kitten/sitting-style: delete 3, insert 3
  CHECK(label_error_rate({{1, 2, 3}, {}}, {{1, 3}, {2, 2}}) == doctest::Approx(3.0 / 4.0));
  CHECK(unpad_labels(ids({1, 2, 0, 3, 0, 0}, {2, 3}), {2, 1}) == LabelSeqs{{1, 2}, {3}});
  CHECK_THROWS_WITH(label_error_rate({{1}}, {{}}), "label_error_rate: the references hold no labels");
  CHECK_THROWS_WITH(ctc_greedy_decode(s, {10}), "ctc_greedy_decode: input_lengths[0] = 10 is outside [0, 9]");
}
