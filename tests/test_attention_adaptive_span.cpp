// The `adaptive-span` variant (models/attention/adaptive_span.h) and its kernel (ops/adaptive_span_attention.h):
// outputs and gradients of q, k, v and z against naive softmax attention with the dense bias log m, the z gradient by
// finite differences, large spans == softmax attention, step() == the parallel rows, empty rows, and errors.
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/threadpool.h"
#include "models/attention/adaptive_span.h"
#include "ops/adaptive_span_attention.h"
#include "ops/attention_naive.h"
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

struct Qkv {
  Tensor q, k, v;
};

Qkv random_qkv(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, uint64_t seed) {
  return {uniform({B, H, Lq, D}, seed, -2, 2), uniform({B, H, Lk, D}, seed + 1, -2, 2),
          uniform({B, H, Lk, Dv}, seed + 2)};
}

AttentionMask make_mask(bool causal, int64_t offset = 0, std::vector<int64_t> lengths = {}) {
  AttentionMask m;
  m.causal = causal;
  m.query_offset = offset;
  m.key_lengths = std::move(lengths);
  return m;
}

// The soft mask, written out here from the paper rather than taken from the op's header.
double soft_mask(double x, double z, double R) { return std::min(1.0, std::max(0.0, (R + z - x) / R)); }

double distance(int64_t i, int64_t j, int64_t offset) { return std::abs(double(i + offset - j)); }

// log m over [1, H, Lq, Lk] (-inf where m = 0): the span mask as the additive bias naive attention takes.
Tensor log_span_bias(const std::vector<double>& z, double R, int64_t Lq, int64_t Lk, int64_t offset) {
  const int64_t H = int64_t(z.size());
  std::vector<double> b;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = 0; j < Lk; ++j) b.push_back(std::log(soft_mask(distance(i, j, offset), z[size_t(h)], R)));
  return from_vector(b, {1, H, Lq, Lk}, DType::F64);
}

struct Result {
  Tensor out, dq, dk, dv, dz;
};

std::vector<Tensor> leaves_of(const Qkv& x, DType dtype) {
  std::vector<Tensor> l;
  for (const Tensor& t : {x.q, x.k, x.v}) l.push_back(t.to(dtype).clone().detach().set_requires_grad(true));
  return l;
}

// Output and gradients of sum(w * out) for fixed random w, through the kernel.
Result run_span(const Qkv& x, const std::vector<double>& z, const AttentionMask& m, double scale, double R,
                bool reference, DType dtype = DType::F64) {
  auto l = leaves_of(x, dtype);
  Tensor zt = from_vector(z, {int64_t(z.size())}, dtype).set_requires_grad(true);
  Tensor out = adaptive_span_attention(l[0], l[1], l[2], zt, m, scale, R, reference);
  out.backward(uniform(out.shape(), 99).to(dtype));
  return {out.detach(), l[0].grad(), l[1].grad(), l[2].grad(), zt.grad()};
}

// The same through naive attention with the bias log m; dz = Σ over the ramp of ∂loss/∂bias · ∂log m/∂z, with
// ∂log m/∂z = 1 / (R m) strictly inside the ramp.
Result run_naive(const Qkv& x, const std::vector<double>& z, AttentionMask m, double scale, double R) {
  auto l = leaves_of(x, DType::F64);
  const int64_t Lq = x.q.size(2), Lk = x.k.size(2);
  Tensor bias = log_span_bias(z, R, Lq, Lk, m.query_offset).set_requires_grad(true);
  m.bias = bias;
  Tensor out = naive_attention(l[0], l[1], l[2], m, scale);
  out.backward(uniform(out.shape(), 99));
  std::vector<double> dz(z.size(), 0.0);
  const std::vector<double> g = bias.grad().to_vector();
  for (size_t h = 0; h < z.size(); ++h)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = 0; j < Lk; ++j) {
        const double mz = soft_mask(distance(i, j, m.query_offset), z[h], R);
        if (mz > 0 && mz < 1) dz[h] += g[(h * size_t(Lq) + size_t(i)) * size_t(Lk) + size_t(j)] / (R * mz);
      }
  return {out.detach(), l[0].grad(), l[1].grad(), l[2].grad(), from_vector(dz, {int64_t(z.size())}, DType::F64)};
}

// Largest |a - b| relative to the largest |b| (at least 1).
double rel_err(const Tensor& a, const Tensor& b) {
  double s = 1;
  for (double x : b.to_vector()) s = std::max(s, std::abs(x));
  return max_abs_diff(a.to(DType::F64), b) / s;
}

bool all_finite(const Tensor& t) {
  for (double x : t.to_vector())
    if (!std::isfinite(x)) return false;
  return true;
}

void check_against_naive(const Qkv& x, const std::vector<double>& z, const AttentionMask& m, double R) {
  const double scale = 1.0 / std::sqrt(double(x.q.size(3)));
  const Result n = run_naive(x, z, m, scale, R);
  for (bool reference : {false, true}) {
    CAPTURE(reference);
    const Result r = run_span(x, z, m, scale, R, reference);
    CHECK(rel_err(r.out, n.out) < 1e-12);
    CHECK(rel_err(r.dq, n.dq) < 1e-12);
    CHECK(rel_err(r.dk, n.dk) < 1e-12);
    CHECK(rel_err(r.dv, n.dv) < 1e-12);
    CHECK(rel_err(r.dz, n.dz) < 1e-12);
  }
  const Result f = run_span(x, z, m, scale, R, false, DType::F32);
  CHECK(f.out.dtype() == DType::F32);
  CHECK(rel_err(f.out, n.out) < 1e-5);
  CHECK(rel_err(f.dq, n.dq) < 1e-4);
  CHECK(rel_err(f.dz, n.dz) < 1e-4);
}

std::unique_ptr<Attention> make_as(std::map<std::string, std::string> opts, int64_t heads = 2) {
  AttentionConfig cfg;
  cfg.heads = heads, cfg.head_dim = 3;
  cfg.options = AttentionOptions(std::move(opts));
  return make_attention("adaptive-span", cfg);
}

}  // namespace

TEST_CASE("adaptive-span kernel: outputs and q, k, v, z gradients == naive attention with bias log m (f64, f32)") {
  const std::vector<double> z{1.3, 4.6};  // reach 3 and 7 with R = 2.5
  const double R = 2.5;
  SUBCASE("causal") { check_against_naive(random_qkv(2, 2, 13, 13, 3, 4, 1), z, make_mask(true), R); }
  SUBCASE("causal, query offset") { check_against_naive(random_qkv(2, 2, 10, 13, 3, 4, 4), z, make_mask(true, 3), R); }
  SUBCASE("causal, key padding") {
    check_against_naive(random_qkv(2, 2, 13, 13, 3, 4, 7), z, make_mask(true, 0, {13, 5}), R);
  }
  SUBCASE("not causal, query offset, key padding") {
    check_against_naive(random_qkv(2, 2, 11, 13, 3, 4, 10), z, make_mask(false, 2, {13, 6}), R);
  }
  SUBCASE("several query blocks and key tiles, causal and not") {
    const Qkv x = random_qkv(1, 2, 150, 150, 8, 5, 13);
    check_against_naive(x, {37.4, 70.2}, make_mask(true), 8.5);
    check_against_naive(x, {37.4, 70.2}, make_mask(false, 0, {141}), 8.5);
  }
}

GRADCHECK("adaptive_span_attention") {
  // z and z + R away from integers, so no distance sits on a kink of m within the step
  const std::vector<Tensor> in{uniform({2, 2, 6, 3}, 20), uniform({2, 2, 7, 3}, 21), uniform({2, 2, 7, 2}, 22),
                               from_vector(std::vector<double>{1.3, 2.6}, {2}, DType::F64)};
  for (bool reference : {false, true}) {
    CAPTURE(reference);
    check_gradients([reference](auto x) {
      return adaptive_span_attention(x[0], x[1], x[2], x[3], make_mask(true, 1), 0.8, 1.5, reference);
    }, in);
    check_gradients([reference](auto x) {
      return adaptive_span_attention(x[0], x[1], x[2], x[3], make_mask(false, 0, {7, 4}), 0.8, 1.5, reference);
    }, in);
  }
}

TEST_CASE("adaptive-span kernel: a span covering every key is softmax attention") {
  const Qkv x = random_qkv(2, 2, 17, 17, 4, 3, 30);
  const double scale = 0.5;
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    const AttentionMask m = make_mask(causal, 0, {17, 11});
    const std::vector<double> z{17, 40.5};  // every distance (at most 16) has m = 1
    const Tensor y = adaptive_span_attention(x.q, x.k, x.v, from_vector(z, {2}, DType::F64), m, scale, 3);
    CHECK(max_abs_diff(y, naive_attention(x.q, x.k, x.v, m, scale)) < 1e-13);
  }
  // the module: init = max_span >= N
  auto a = make_as({{"max_span", "20"}, {"init", "20"}, {"ramp", "4"}});
  a->to(DType::F64);
  auto soft = make_attention("softmax", AttentionConfig{});
  const AttentionMask c = make_mask(true);
  CHECK(max_abs_diff(a->forward(x.q, x.k, x.v, c), soft->forward(x.q, x.k, x.v, c)) < 1e-13);
}

TEST_CASE("adaptive-span kernel: keys beyond z + R are never read; rows with no visible key are 0, not NaN") {
  const double R = 1.5;
  const std::vector<double> z{2.2};  // reach 3: row i reads keys i - 3 .. i
  Qkv x = random_qkv(1, 1, 150, 150, 4, 3, 40);
  Qkv poisoned{x.q, x.k.clone(), x.v.clone()};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  narrow(poisoned.k, 2, 0, 5).fill(nan);
  narrow(poisoned.v, 2, 0, 5).fill(nan);
  // The reference reads only each row's window (rows >= 8 are clean); the tiled kernel reads the union of its
  // 64-query block's windows, so its second block (rows 64 ..) is clean.
  for (bool reference : {true, false}) {
    CAPTURE(reference);
    const int64_t clean = reference ? 8 : 64;
    const Result a = run_span(poisoned, z, make_mask(true), 0.5, R, reference);
    const Result b = run_span(x, z, make_mask(true), 0.5, R, reference);
    CHECK(all_finite(narrow(a.out, 2, clean, 150 - clean)));
    CHECK(max_abs_diff(narrow(a.out, 2, clean, 150 - clean), narrow(b.out, 2, clean, 150 - clean)) == 0);
  }

  // no visible key: batch 0 entirely padded; in batch 1 (4 keys, reach 1, not causal) rows >= 5 see none
  const Qkv y = random_qkv(2, 1, 12, 12, 3, 2, 50);
  const AttentionMask m = make_mask(false, 0, {0, 4});
  for (bool reference : {false, true}) {
    CAPTURE(reference);
    const Result r = run_span(y, {0.5}, m, 0.7, 1.0, reference);
    for (const Tensor& t : {r.out, r.dq, r.dk, r.dv, r.dz}) CHECK(all_finite(t));
    for (double v : narrow(r.out, 0, 0, 1).to_vector()) CHECK(v == 0);
    for (double v : narrow(narrow(r.out, 0, 1, 1), 2, 5, 7).to_vector()) CHECK(v == 0);
    for (double v : narrow(narrow(r.dq, 0, 1, 1), 2, 5, 7).to_vector()) CHECK(v == 0);
    CHECK(max_abs_diff(r.out, run_naive(y, {0.5}, m, 0.7, 1.0).out) < 1e-13);
    // z <= -R hides every key
    const Result none = run_span(y, {-2.0}, make_mask(true), 0.7, 1.0, reference);
    CHECK(all_finite(none.dq));
    for (double v : none.out.to_vector()) CHECK(v == 0);
    for (double v : none.dz.to_vector()) CHECK(v == 0);
  }
}

TEST_CASE("adaptive-span kernel: results do not depend on the thread count") {
  const Qkv x = random_qkv(2, 3, 140, 140, 8, 8, 60);
  const int saved = num_threads();
  std::vector<Result> runs;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    runs.push_back(run_span(x, {5.5, 30.2, 90.7}, make_mask(true), 0.35, 6, false, DType::F32));
  }
  set_num_threads(saved);
  for (size_t i = 1; i < runs.size(); ++i) {
    CHECK(max_abs_diff(runs[i].out, runs[0].out) == 0);
    CHECK(max_abs_diff(runs[i].dk, runs[0].dk) == 0);
    CHECK(max_abs_diff(runs[i].dz, runs[0].dz) == 0);
  }
}

TEST_CASE("adaptive-span: the module is the kernel at z = S * clamp(span, 0, 1), straight-through gradient") {
  auto a = make_as({{"max_span", "10"}, {"ramp", "2.5"}, {"init", "4"}});
  CHECK(a->name() == "adaptive-span");
  a->to(DType::F64);
  auto& as = dynamic_cast<AdaptiveSpanAttention&>(*a);
  CHECK(as.span().shape() == Shape{2});
  CHECK(as.spans()[0] == doctest::Approx(4));
  CHECK(as.spans()[1] == doctest::Approx(4));
  CHECK(as.cache_positions() == 13);
  const Qkv x = random_qkv(2, 2, 14, 14, 3, 2, 70);  // distances up to 13 reach the ramp at z = S
  const double scale = 1.0 / std::sqrt(3.0);

  as.span().copy_from(from_vector(std::vector<double>{1.3, -0.2}, {2}, DType::F64));  // outside [0, 1]
  CHECK(as.spans() == std::vector<double>{10, 0});
  const Tensor w = uniform({2, 2, 14, 2}, 71);
  sum(mul(a->forward(x.q, x.k, x.v, make_mask(true)), w)).backward();
  Tensor z = from_vector(std::vector<double>{10, 0}, {2}, DType::F64).set_requires_grad(true);
  const Tensor y = adaptive_span_attention(x.q, x.k, x.v, z, make_mask(true), scale, 2.5);
  sum(mul(y, w)).backward();
  CHECK(max_abs_diff(a->forward(x.q, x.k, x.v, make_mask(true)), y) == 0);
  CHECK(max_abs_diff(as.span().grad(), mul_scalar(z.grad(), 10)) < 1e-14);  // ∂z/∂span = S, clamp passed through
  CHECK(z.grad().at({0}) != 0);

  // finite differences through the module, spans inside (0, 1) and off the kinks
  as.span().copy_from(from_vector(std::vector<double>{0.33, 0.71}, {2}, DType::F64));
  const AttentionMask pad = make_mask(false, 0, {14, 6});
  check_parameter_gradients(a->named_parameters(), [&] { return a->forward(x.q, x.k, x.v, pad); });
  auto ref = make_as({{"max_span", "10"}, {"ramp", "2.5"}, {"impl", "reference"}});
  ref->to(DType::F64);
  dynamic_cast<AdaptiveSpanAttention&>(*ref).span().copy_from(as.span());
  CHECK(max_abs_diff(ref->forward(x.q, x.k, x.v, make_mask(true)), a->forward(x.q, x.k, x.v, make_mask(true))) < 1e-14);
}

TEST_CASE("adaptive-span: penalty() = lambda * mean z, zero gradient outside [0, S]; none for other variants") {
  CHECK_FALSE(make_attention("softmax", AttentionConfig{})->penalty().defined());
  auto a = make_as({{"max_span", "100"}, {"init", "30"}});  // default penalty 2e-6
  auto& as = dynamic_cast<AdaptiveSpanAttention&>(*a);
  CHECK(a->penalty().item() == doctest::Approx(2e-6 * 30).epsilon(1e-6));
  as.span().copy_from(from_vector(std::vector<double>{0.2, 1.5}, {2}, DType::F32));  // z = 20 and (clamped) 100
  auto b = make_as({{"max_span", "100"}, {"penalty", "0.5"}});
  auto& bs = dynamic_cast<AdaptiveSpanAttention&>(*b);
  bs.span().copy_from(as.span());
  const Tensor p = b->penalty();
  CHECK(p.item() == doctest::Approx(0.5 * (20 + 100) / 2).epsilon(1e-6));
  p.backward();
  CHECK(bs.span().grad().at({0}) == doctest::Approx(0.5 * 100 / 2));  // λ S / H
  CHECK(bs.span().grad().at({1}) == 0);
}

TEST_CASE("adaptive-span: step() == the causal parallel rows at every position, in a bounded cache") {
  auto a = make_as({{"max_span", "6"}, {"ramp", "2.5"}});
  a->to(DType::F64);
  auto& as = dynamic_cast<AdaptiveSpanAttention&>(*a);
  as.span().copy_from(from_vector(std::vector<double>{0.3, 0.97}, {2}, DType::F64));  // z = 1.8 and 5.82
  const int64_t N = 45, keep = as.cache_positions();
  CHECK(keep == 9);
  const Qkv x = random_qkv(2, 2, N, N, 3, 4, 80);
  const Tensor want = a->forward(x.q, x.k, x.v, make_mask(true));
  auto st = a->new_state();
  auto* cache = dynamic_cast<AdaptiveSpanState*>(st.get());
  REQUIRE(cache != nullptr);
  for (int64_t t = 0; t < N; ++t) {
    const Tensor y = a->step(narrow(x.q, 2, t, 1), narrow(x.k, 2, t, 1), narrow(x.v, 2, t, 1), *st, AttentionMask{});
    CHECK(max_abs_diff(y, narrow(want, 2, t, 1)) < 1e-13);
    CHECK(cache->stored <= 2 * keep);
    CHECK(cache->capacity() <= 2 * keep);
    CHECK(cache->start + cache->stored == t + 1);
    st->length++;
  }
  CHECK(cache->start > 0);  // the buffer slid
  CHECK_THROWS_WITH(a->step(narrow(x.q, 2, 0, 1), narrow(x.k, 2, 0, 1), narrow(x.v, 2, 0, 1), *st,
                            make_mask(false, 0, {1, 1})),
                    "attention 'adaptive-span' step: key padding has no meaning for one step");
  st->length = 3;
  CHECK_THROWS_WITH(a->step(narrow(x.q, 2, 0, 1), narrow(x.k, 2, 0, 1), narrow(x.v, 2, 0, 1), *st, AttentionMask{}),
                    "attention 'adaptive-span' step: state.length is 3 but the cache ends at position 45 (advance "
                    "length by one after each step)");
  AttentionState other;
  CHECK_THROWS_WITH(a->step(narrow(x.q, 2, 0, 1), narrow(x.k, 2, 0, 1), narrow(x.v, 2, 0, 1), other, AttentionMask{}),
                    "attention 'adaptive-span' step: the state was not made by this variant's new_state()");
}

TEST_CASE("adaptive-span: bad options, shapes and masks are refused") {
  const char* who = "attention 'adaptive-span': option ";
  CHECK_THROWS_WITH(make_as({{"max_span", "0"}}),
                    (std::string(who) + "max_span expects an integer >= 1, got '0'").c_str());
  CHECK_THROWS_WITH(make_as({{"ramp", "0"}}), (std::string(who) + "ramp expects a finite number > 0, got '0'").c_str());
  CHECK_THROWS_WITH(make_as({{"max_span", "8"}, {"init", "9"}}),
                    (std::string(who) + "init expects a finite number in [0, 8], got '9'").c_str());
  CHECK_THROWS_WITH(make_as({{"penalty", "-1"}}),
                    (std::string(who) + "penalty expects a finite number >= 0, got '-1'").c_str());
  CHECK_THROWS_WITH(make_as({{"scale", "0"}}),
                    (std::string(who) + "scale expects a finite number > 0, got '0'").c_str());
  CHECK_THROWS_WITH(make_as({{"impl", "flash"}}),
                    (std::string(who) + "impl must be tiled or reference, got 'flash'").c_str());
  CHECK_THROWS_WITH(make_as({{"span", "3"}}), "attention 'adaptive-span': unknown option 'span'");
  CHECK_THROWS_WITH(make_as({{"max_span", "wide"}}), doctest::Contains("max_span"));

  auto a = make_as({});
  const Tensor q = uniform({1, 3, 4, 3}, 1).to(DType::F32);
  CHECK_THROWS_WITH(a->forward(q, q, q, {}), "attention 'adaptive-span': built for 2 heads, got q [1, 3, 4, 3]");

  const Qkv x = random_qkv(1, 2, 4, 5, 3, 2, 90);
  const Tensor z = from_vector(std::vector<double>{1, 2}, {2}, DType::F64);
  const std::string bad_z =
      "adaptive_span_attention: z must be [2] (one span per head) of f64 for q [1, 2, 4, 3], got ";
  CHECK_THROWS_WITH(adaptive_span_attention(x.q, x.k, x.v, from_vector(std::vector<double>{1, 2, 3}, {3}, DType::F64),
                                            {}, 1, 2),
                    (bad_z + "[3] f64").c_str());
  CHECK_THROWS_WITH(adaptive_span_attention(x.q, x.k, x.v, z.to(DType::F32), {}, 1, 2), (bad_z + "[2] f32").c_str());
  CHECK_THROWS_WITH(adaptive_span_attention(x.q, x.k, x.v, Tensor(), {}, 1, 2),
                    "adaptive_span_attention: z (one span per head) is undefined");
  CHECK_THROWS_WITH(adaptive_span_attention(x.q, x.k, x.v, from_vector(std::vector<double>{1, NAN}, {2}, DType::F64),
                                            {}, 1, 2),
                    "adaptive_span_attention: z[1] = nan is not finite");
  CHECK_THROWS_WITH(adaptive_span_attention(x.q, x.k, x.v, z, {}, 1, 0),
                    "adaptive_span_attention: ramp must be > 0, got 0");
  CHECK_THROWS_WITH(adaptive_span_attention(x.q, x.k, x.v, z, make_mask(false, 0, {6}), 1, 2),
                    "adaptive_span_attention: key_lengths[0] = 6 is outside [0, 5]");
  for (int which = 0; which < 3; ++which) {
    AttentionMask m;
    if (which == 0) m.keep = ones({1, 1, 4, 5}, DType::F64);
    if (which == 1) m.bias = zeros({1, 1, 4, 5}, DType::F64);
    if (which == 2) m.alibi_slopes = ones({2}, DType::F64);
    CHECK_THROWS_WITH(adaptive_span_attention(x.q, x.k, x.v, z, m, 1, 2),
                      "adaptive_span_attention: keep, bias and ALiBi masks are not supported (only causal, "
                      "query_offset and key_lengths)");
  }
  CHECK_THROWS_WITH(adaptive_span_attention(x.q, narrow(x.k, 3, 0, 2), x.v, z, {}, 1, 2),
                    doctest::Contains("head dim"));
}
