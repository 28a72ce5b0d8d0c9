// Softmax attention against its reference: the flash kernel (ops/attention_flash.h) against naive_attention, which
// materialises the logits with the dense mask of ops/attention_mask.h (itself checked by hand); step() against the
// causal forward; the options and every error message.
#include <cmath>
#include <limits>
#include <tuple>

#include "engine/allocator.h"
#include "engine/threadpool.h"
#include "models/attention/softmax.h"
#include "ops/attention_flash.h"
#include "ops/attention_mask.h"
#include "ops/attention_naive.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

using AttnFn = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const AttentionMask&, double);

struct Qkv {
  Tensor q, k, v;
};

Qkv random_qkv(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, uint64_t seed,
               DType dtype = DType::F64) {
  return {uniform({B, H, Lq, D}, seed, -2, 2).to(dtype), uniform({B, H, Lk, D}, seed + 1, -2, 2).to(dtype),
          uniform({B, H, Lk, Dv}, seed + 2).to(dtype)};
}

// Output and the gradients of q, k, v of sum(w * attention(q, k, v)) for fixed random weights w.
std::vector<Tensor> run(AttnFn fn, const Qkv& x, const AttentionMask& mask, double scale) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : {x.q, x.k, x.v}) leaves.push_back(t.clone().detach().set_requires_grad(true));
  Tensor out = fn(leaves[0], leaves[1], leaves[2], mask, scale);
  out.backward(uniform(out.shape(), 99).to(out.dtype()));
  return {out.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
}

// Largest |a - b| relative to the largest |b| (at least 1).
double rel_err(const Tensor& a, const Tensor& b) {
  double scale = 1;
  for (double x : b.to_vector()) scale = std::max(scale, std::abs(x));
  return eng::test::max_abs_diff(a, b) / scale;
}

bool all_finite(const Tensor& t) {
  for (double x : t.to_vector())
    if (!std::isfinite(x)) return false;
  return true;
}

void check_flash_matches_naive(const Qkv& x, const AttentionMask& mask, double tol) {
  const double scale = 1.0 / std::sqrt(double(x.q.size(3)));
  auto f = run(flash_attention, x, mask, scale);
  auto n = run(naive_attention, x, mask, scale);
  const char* what[] = {"output", "dq", "dk", "dv"};
  for (size_t i = 0; i < 4; ++i) {
    CHECK_MESSAGE(all_finite(f[i]), what[i]);
    CHECK_MESSAGE(rel_err(f[i], n[i]) <= tol, what[i], " differs by ", rel_err(f[i], n[i]));
  }
}

AttentionMask causal_mask(int64_t offset = 0) {
  AttentionMask m;
  m.causal = true;
  m.query_offset = offset;
  return m;
}

}  // namespace

GRADCHECK("flash_attention") {
  const Shape qs{2, 2, 5, 3}, ks{2, 2, 7, 3}, vs{2, 2, 7, 4};
  const std::vector<Tensor> qkv{uniform(qs, 1), uniform(ks, 2), uniform(vs, 3)};
  check_gradients([](auto x) { return flash_attention(x[0], x[1], x[2], {}, 0.7); }, qkv);
  check_gradients([](auto x) { return flash_attention(x[0], x[1], x[2], causal_mask(), 0.7); }, qkv);
  check_gradients([](auto x) { return flash_attention(x[0], x[1], x[2], causal_mask(2), 0.7); }, qkv);
  AttentionMask padded;
  padded.key_lengths = {4, 0};  // batch element 1 sees no key: zero output, zero gradient
  check_gradients([padded](auto x) { return flash_attention(x[0], x[1], x[2], padded, 0.7); }, qkv);
  AttentionMask alibi = causal_mask(2);
  alibi.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  check_gradients([alibi](auto x) { return flash_attention(x[0], x[1], x[2], alibi, 0.7); }, qkv);
  AttentionMask keep;
  keep.keep = from_vector(std::vector<double>{1, 0, 1, 1, 0, 1, 1}, {7});
  check_gradients([keep](auto x) { return flash_attention(x[0], x[1], x[2], keep, 0.7); }, qkv);
  // a bias broadcast over the batch gets its gradient too
  check_gradients(
      [](auto x) {
        AttentionMask m = causal_mask();
        m.bias = x[3];
        return flash_attention(x[0], x[1], x[2], m, 0.7);
      },
      {qkv[0], qkv[1], qkv[2], uniform({2, 5, 7}, 4)});
  // q read through permuted strides; k with a strided last axis (copied to contiguous rows)
  check_gradients([](auto x) { return flash_attention(permute(x[0], {0, 2, 1, 3}), transpose(x[1]), x[2], {}, 0.7); },
                  {uniform({2, 5, 2, 3}, 5), uniform({2, 2, 3, 7}, 6), uniform(vs, 7)});
  // several 64 x 64 tiles, partial ones at the edges, causal skipping and padding across tiles
  check_gradients(
      [](auto x) {
        AttentionMask m = causal_mask(-2);
        m.key_lengths = {66};
        return flash_attention(x[0], x[1], x[2], m, 0.9);
      },
      {uniform({1, 1, 70, 2}, 8), uniform({1, 1, 67, 2}, 9), uniform({1, 1, 67, 2}, 10)});
}

TEST_CASE("dense_attention_mask: causal with offset, padding, ALiBi, keep and bias by hand") {
  const double inf = std::numeric_limits<double>::infinity();
  AttentionMask m = causal_mask(1);
  m.key_lengths = {2};
  m.alibi_slopes = from_vector(std::vector<double>{0.5, 1.0}, {2}, DType::F64);
  Tensor d = dense_attention_mask(m, 1, 2, 2, 3, DType::F64);
  REQUIRE(d.shape() == Shape{1, 2, 2, 3});
  // query 0 is at position 1 and query 1 at position 2; key 2 is padding
  CHECK(d.to_vector() == std::vector<double>{-0.5, 0, -inf, -1, -0.5, -inf, -1, 0, -inf, -2, -1, -inf});
  AttentionMask kb;
  kb.keep = from_vector(std::vector<double>{1, 0, 1}, {3}, DType::I64);
  kb.bias = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor e = dense_attention_mask(kb, 1, 1, 2, 3, DType::F32);
  CHECK(e.to_vector() == std::vector<double>{1, -inf, 3, 4, -inf, 6});
  CHECK(dense_attention_mask({}, 1, 1, 1, 2, DType::F32).to_vector() == std::vector<double>{0, 0});
}

TEST_CASE("flash_attention == naive_attention: outputs and gradients of q, k, v") {
  const Qkv x = random_qkv(2, 3, 9, 9, 5, 4, 11);
  SUBCASE("non-causal") { check_flash_matches_naive(x, {}, 1e-12); }
  SUBCASE("causal") { check_flash_matches_naive(x, causal_mask(), 1e-12); }
  SUBCASE("padded keys") {
    AttentionMask m;
    m.key_lengths = {3, 9};
    check_flash_matches_naive(x, m, 1e-12);
    m.causal = true;
    check_flash_matches_naive(x, m, 1e-12);
  }
  SUBCASE("cross-attention, Lq != Lk") {
    check_flash_matches_naive(random_qkv(2, 2, 6, 11, 3, 5, 12), {}, 1e-12);
    AttentionMask m;
    m.key_lengths = {11, 4};
    check_flash_matches_naive(random_qkv(2, 2, 13, 11, 3, 5, 13), m, 1e-12);
  }
  SUBCASE("query_offset > 0: the last queries of a longer sequence") {
    check_flash_matches_naive(random_qkv(2, 2, 4, 10, 3, 3, 14), causal_mask(6), 1e-12);
  }
  SUBCASE("ALiBi") {
    AttentionMask m = causal_mask(3);
    m.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25, 0.125}, {3}, DType::F32);
    check_flash_matches_naive(random_qkv(2, 3, 6, 9, 4, 4, 15), m, 1e-12);
    m.causal = false;
    check_flash_matches_naive(random_qkv(2, 3, 6, 9, 4, 4, 16), m, 1e-12);
  }
  SUBCASE("keep mask (f32 keep for f64 inputs)") {
    AttentionMask m;
    std::vector<double> kv;
    for (double u : uniform({2, 1, 9, 9}, 17).to_vector()) kv.push_back(u > -0.4 ? 1 : 0);
    m.keep = from_vector(kv, {2, 1, 9, 9});
    check_flash_matches_naive(x, m, 1e-12);
  }
  SUBCASE("bias") {
    AttentionMask m = causal_mask();
    m.bias = uniform({9, 9}, 18);
    check_flash_matches_naive(x, m, 1e-12);
  }
}

TEST_CASE("flash_attention == naive_attention on lengths that are not multiples of the block size") {
  for (auto sizes : {std::pair<int64_t, int64_t>{1, 1}, {1, 130}, {63, 65}, {65, 63}, {130, 130}, {64, 129}}) {
    const int64_t Lq = sizes.first, Lk = sizes.second;
    CAPTURE(Lq);
    CAPTURE(Lk);
    const Qkv x = random_qkv(2, 1, Lq, Lk, 3, 2, uint64_t(Lq * 1000 + Lk));
    check_flash_matches_naive(x, {}, 1e-12);
    AttentionMask m = causal_mask(Lk - Lq);
    m.key_lengths = {Lk, (Lk + 1) / 2};
    check_flash_matches_naive(x, m, 1e-12);
  }
  const Qkv x = random_qkv(1, 2, 65, 130, 8, 8, 21, DType::F32);
  check_flash_matches_naive(x, causal_mask(65), 1e-5);
}

TEST_CASE("flash_attention: the bias gradient matches naive across tiles") {
  const Qkv x = random_qkv(1, 2, 70, 80, 3, 3, 22);
  Tensor grads[2];
  AttnFn fns[2] = {flash_attention, naive_attention};
  for (int i = 0; i < 2; ++i) {
    Tensor bias = uniform({1, 2, 70, 80}, 23).set_requires_grad(true);
    AttentionMask m = causal_mask(10);
    m.bias = bias;
    fns[i](x.q, x.k, x.v, m, 0.5).backward(uniform({1, 2, 70, 3}, 24));
    grads[i] = bias.grad();
  }
  CHECK(rel_err(grads[0], grads[1]) <= 1e-12);
}

TEST_CASE("flash_attention: fully masked rows give exact zeros and no NaN, in outputs and gradients") {
  const Qkv x = random_qkv(2, 2, 5, 6, 3, 3, 31);
  AttentionMask lengths;
  lengths.key_lengths = {0, 6};
  AttentionMask before = causal_mask(-3);  // queries 0..2 come before every key
  AttentionMask keep;
  Tensor k = ones({5, 6});
  for (int64_t j = 0; j < 6; ++j) k.set_at({1, j}, 0);  // query 1 keeps nothing
  keep.keep = k;
  AttentionMask bias;
  Tensor bv = zeros({5, 6}, DType::F64);
  for (int64_t j = 0; j < 6; ++j) bv.set_at({4, j}, -std::numeric_limits<double>::infinity());
  bias.bias = bv;
  // (mask, batch element, first and last masked query) of each case
  for (auto [mask, b, i0, i1] : {std::tuple<AttentionMask, int64_t, int64_t, int64_t>{lengths, 0, 0, 4},
                                 {before, 1, 0, 2}, {keep, 1, 1, 1}, {bias, 0, 4, 4}}) {
    for (AttnFn fn : {flash_attention, naive_attention}) {
      auto r = run(fn, x, mask, 0.5);
      for (const Tensor& t : r) CHECK(all_finite(t));
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = i0; i <= i1; ++i)
          for (int64_t d = 0; d < 3; ++d) {
            CHECK(r[0].at({b, h, i, d}) == 0);
            CHECK(r[1].at({b, h, i, d}) == 0);
          }
    }
    check_flash_matches_naive(x, mask, 1e-12);
  }
  // a batch element without keys sends no gradient to its keys and values either
  auto r = run(flash_attention, x, lengths, 0.5);
  CHECK(std::abs(sum(narrow(r[2], 0, 0, 1)).item()) == 0);
  CHECK(std::abs(sum(narrow(r[3], 0, 0, 1)).item()) == 0);
}

TEST_CASE("flash_attention: a NaN logit makes its row NaN, even when it is the only key the row sees") {
  Qkv x = random_qkv(1, 1, 3, 70, 2, 2, 35);
  x.q.set_at({0, 0, 0, 0}, std::nan(""));
  for (AttnFn fn : {flash_attention, naive_attention}) {
    Tensor out = fn(x.q, x.k, x.v, causal_mask(), 0.5);  // query 0 sees key 0 only
    CHECK(std::isnan(out.at({0, 0, 0, 0})));
    CHECK(std::isfinite(out.at({0, 0, 1, 0})));
    Tensor wide = fn(x.q, x.k, x.v, {}, 0.5);  // the NaN row spans both key tiles
    CHECK(std::isnan(wide.at({0, 0, 0, 1})));
  }
}

TEST_CASE("flash_attention: the backward schedule (per head or per block) and thread count do not change results") {
  const int before = num_threads();
  const Qkv x = random_qkv(2, 2, 100, 90, 4, 3, 41);
  AttentionMask m = causal_mask(-5);
  m.key_lengths = {90, 70};
  std::vector<Tensor> ref;
  for (int threads : {1, 3}) {  // 1 thread: one task per head; 3 threads: key-block and query-block passes
    set_num_threads(threads);
    auto r = run(flash_attention, x, m, 0.5);
    if (ref.empty()) ref = r;
    for (size_t i = 0; i < 4; ++i) CHECK(eng::test::max_abs_diff(r[i], ref[i]) == 0);
  }
  set_num_threads(before);
}

TEST_CASE("softmax attention: step() token by token equals the causal forward at every position") {
  const int64_t B = 2, H = 2, T = 40, D = 4;  // 40 positions: the cache grows past its first capacity twice
  const Qkv x = random_qkv(B, H, T, T, D, 3, 51);
  AttentionMask alibi;
  alibi.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  for (const char* impl : {"flash", "naive"})
    for (const AttentionMask& extra : {AttentionMask{}, alibi}) {
      CAPTURE(impl);
      AttentionConfig cfg;
      cfg.heads = H, cfg.head_dim = D, cfg.causal = true;
      cfg.options.set("impl", impl);
      auto attn = make_attention("softmax", cfg);
      AttentionMask full = extra;
      full.causal = true;
      Tensor whole = attn->forward(x.q, x.k, x.v, full);
      auto state = attn->new_state();
      REQUIRE(state);
      for (int64_t t = 0; t < T; ++t) {
        Tensor y = attn->step(narrow(x.q, 2, t, 1), narrow(x.k, 2, t, 1), narrow(x.v, 2, t, 1), *state, extra);
        CHECK(state->length == t);  // the caller advances it
        state->length++;
        CHECK(eng::test::max_abs_diff(y, narrow(whole, 2, t, 1)) <= 1e-12);
      }
    }
}

TEST_CASE("softmax attention: options, registry and errors") {
  const Qkv x = random_qkv(1, 2, 5, 5, 4, 4, 61);
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 4;
  auto flash = make_attention("softmax", cfg);
  CHECK(flash->name() == "softmax");
  CHECK(eng::test::max_abs_diff(flash->forward(x.q, x.k, x.v, {}), naive_attention(x.q, x.k, x.v, {}, 0.5)) < 1e-12);
  cfg.options.set("impl", "naive");
  cfg.options.set("scale", "0.3");
  CHECK(eng::test::max_abs_diff(make_attention("softmax", cfg)->forward(x.q, x.k, x.v, {}),
                                flash_attention(x.q, x.k, x.v, {}, 0.3)) < 1e-12);
  cfg.options.set_pair("window=4", "test");
  CHECK_THROWS_WITH(make_attention("softmax", cfg), "attention 'softmax': unknown option 'window'");
  CHECK_THROWS_WITH(cfg.options.set_pair("window", "test"), "test: --attn-opt expects name=value, got 'window'");
  CHECK_THROWS_WITH(cfg.options.set_pair("=4", "test"), "test: --attn-opt expects name=value, got '=4'");
  AttentionConfig bad;
  bad.options.set("impl", "fast");
  CHECK_THROWS_WITH(make_attention("softmax", bad), "attention 'softmax': option impl must be auto, flash or naive, got 'fast'");
  bad.options.set("impl", "auto");
  bad.options.set("scale", "-1");
  CHECK_THROWS_WITH(make_attention("softmax", bad), "attention 'softmax': option scale expects a finite number > 0, "
                                                    "got '-1'");

  auto state = flash->new_state();
  flash->step(narrow(x.q, 2, 0, 1), narrow(x.k, 2, 0, 1), narrow(x.v, 2, 0, 1), *state, {});
  state->length = 2;
  CHECK_THROWS_WITH(flash->step(narrow(x.q, 2, 1, 1), narrow(x.k, 2, 1, 1), narrow(x.v, 2, 1, 1), *state, {}),
                    "attention 'softmax' step: state.length is 2 but the cache holds 1 positions (advance length by "
                    "one after each step)");
  state->length = 1;
  CHECK_THROWS_WITH(flash->step(x.q, x.k, x.v, *state, {}),
                    "attention 'softmax' step: q, k and v must be one position [B, H, 1, D], got q [1, 2, 5, 4], k [1, "
                    "2, 5, 4], v [1, 2, 5, 4]");
  Tensor k3 = zeros({1, 2, 1, 3}, DType::F64);
  CHECK_THROWS_WITH(flash->step(zeros({1, 2, 1, 3}, DType::F64), k3, zeros({1, 2, 1, 4}, DType::F64), *state, {}),
                    "attention 'softmax' step: k [1, 2, 1, 3] and v [1, 2, 1, 4] do not match the cache of keys [1, 2, "
                    "16, 4] and values [1, 2, 16, 4]");
}

TEST_CASE("flash_attention and naive_attention: shape and mask errors name the op and the shapes") {
  const Qkv x = random_qkv(2, 2, 5, 7, 3, 4, 71);
  CHECK_THROWS_WITH(flash_attention(x.q, zeros({2, 2, 7, 4}, DType::F64), x.v, {}, 1),
                    "flash_attention: q [2, 2, 5, 3] and k [2, 2, 7, 4] differ in batch, heads or head dim");
  CHECK_THROWS_WITH(flash_attention(zeros({2, 5, 3}, DType::F64), x.k, x.v, {}, 1),
                    "flash_attention: q, k, v must be [B, H, L, D], got q [2, 5, 3], k [2, 2, 7, 3], v [2, 2, 7, 4]");
  CHECK_THROWS_WITH(naive_attention(x.q, x.k, zeros({2, 2, 6, 4}, DType::F64), {}, 1),
                    "naive_attention: k [2, 2, 7, 3] and v [2, 2, 6, 4] differ in batch, heads or length");
  AttentionMask m;
  m.key_lengths = {7};
  CHECK_THROWS_WITH(flash_attention(x.q, x.k, x.v, m, 1), "flash_attention: key_lengths has 1 entries for a batch of 2");
  m.key_lengths = {7, 8};
  CHECK_THROWS_WITH(flash_attention(x.q, x.k, x.v, m, 1), "flash_attention: key_lengths[1] = 8 is outside [0, 7]");
  AttentionMask b;
  b.bias = zeros({3, 7}, DType::F64);
  CHECK_THROWS_WITH(naive_attention(x.q, x.k, x.v, b, 1),
                    "naive_attention: bias of shape [3, 7] cannot be broadcast to the logits [2, 2, 5, 7]");
  b.bias = zeros({5, 7});
  CHECK_THROWS_WITH(flash_attention(x.q, x.k, x.v, b, 1), "flash_attention: bias is f32, the logits are f64");
  AttentionMask kp;
  kp.keep = ones({2, 3, 1, 1});
  CHECK_THROWS_WITH(flash_attention(x.q, x.k, x.v, kp, 1),
                    "flash_attention: keep of shape [2, 3, 1, 1] cannot be broadcast to the logits [2, 2, 5, 7]");
  AttentionMask a;
  a.alibi_slopes = ones({3});
  CHECK_THROWS_WITH(flash_attention(x.q, x.k, x.v, a, 1),
                    "flash_attention: alibi_slopes of shape [3] must be [2] (one slope per head)");
  a.alibi_slopes = ones({2}).set_requires_grad(true);
  CHECK_THROWS_WITH(flash_attention(x.q, x.k, x.v, a, 1),
                    "flash_attention: alibi_slopes are constants and must not require grad");
}

TEST_CASE("flash_attention: long sequence N = 4096 (f32) matches naive, without an N x N buffer") {
  const int64_t N = 4096;
  const Qkv x = random_qkv(1, 1, N, N, 16, 16, 25, DType::F32);
  const AttentionMask m = causal_mask();
  allocator::empty_cache();  // a cached block larger than a request would count in full
  const size_t live = allocator::stats().live_bytes;
  allocator::reset_peak();
  auto f = run(flash_attention, x, m, 0.25);
  const size_t flash_peak = allocator::stats().peak_bytes - live;
  CHECK(flash_peak < size_t(N * N) * sizeof(float) / 16);  // inputs, outputs and grads are ~1.8 MB
  auto n = run(naive_attention, x, m, 0.25);
  for (size_t i = 0; i < 4; ++i) CHECK(rel_err(f[i], n[i]) <= 1e-4);
}
