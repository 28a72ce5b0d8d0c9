// The linear attention kernels (ops/linear_attention.h) against the quadratic form built from plain ops:
// sim = φ(Q) φ(K)ᵀ materialised, masked, normalised by its row sums.
#include <cmath>
#include <vector>

#include "engine/allocator.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/linear_attention.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

Tensor phi(const Tensor& x, LinearFeature f) {
  switch (f) {
    case LinearFeature::EluPlusOne: return add_scalar(elu(x), 1.0);
    case LinearFeature::Relu: return relu(x);
    case LinearFeature::Identity: break;
  }
  return x;
}

// The reference: [B, H, N, L] similarities with causal and padding masks as an explicit 0/1 tensor.
Tensor quadratic(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionArgs& a, bool causal) {
  const int64_t B = q.size(0), N = q.size(2), L = k.size(2);
  std::vector<double> keep(size_t(B * N * L), 1.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < L; ++j)
        if ((causal && j > i) || (!a.key_lengths.empty() && j >= a.key_lengths[size_t(b)]))
          keep[size_t((b * N + i) * L + j)] = 0;
  Tensor mask = from_vector(keep, {B, 1, N, L}, DType::F64).to(q.dtype());
  Tensor sim = mul(matmul(phi(q, a.feature), transpose(phi(k, a.feature), 2, 3)), mask);
  return div(matmul(sim, v), add_scalar(sum(sim, {3}, true), a.eps));
}

struct Case {
  int64_t B, H, N, L, M, Dv;
  bool causal;
  LinearFeature feature;
  std::vector<int64_t> key_lengths;
};

void check_case(const Case& c) {
  CAPTURE(c.N);
  CAPTURE(c.L);
  CAPTURE(c.causal);
  LinearAttentionArgs a;
  a.feature = c.feature;
  a.key_lengths = c.key_lengths;
  std::vector<Tensor> x = {uniform({c.B, c.H, c.N, c.M}, 1, -2, 2), uniform({c.B, c.H, c.L, c.M}, 2, -2, 2),
                           uniform({c.B, c.H, c.L, c.Dv}, 3)};
  Tensor w = uniform({c.B, c.H, c.N, c.Dv}, 4);
  std::vector<Tensor> got, want;
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : x) leaves.push_back(t.clone().detach().set_requires_grad(true));
    Tensor y = pass == 0 ? (c.causal ? causal_linear_attention(leaves[0], leaves[1], leaves[2], a)
                                     : linear_attention(leaves[0], leaves[1], leaves[2], a))
                         : quadratic(leaves[0], leaves[1], leaves[2], a, c.causal);
    sum(mul(y, w)).backward();
    auto& dst = pass == 0 ? got : want;
    dst = {y.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
  }
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(eng::test::allclose(got[i], want[i], 1e-9, 1e-11));
  }
}

}  // namespace

TEST_CASE("linear attention == quadratic form, outputs and gradients, across chunk boundaries") {
  for (bool causal : {false, true})
    for (LinearFeature f : {LinearFeature::EluPlusOne, LinearFeature::Relu}) {
      check_case({2, 2, 150, 150, 5, 3, causal, f, {}});
      check_case({1, 3, 64, 64, 4, 6, causal, f, {}});
      check_case({2, 1, 7, 7, 3, 2, causal, f, {}});
    }
  check_case({2, 2, 37, 90, 4, 3, false, LinearFeature::EluPlusOne, {}});  // cross: N != L
  check_case({2, 2, 130, 130, 4, 3, false, LinearFeature::EluPlusOne, {70, 130}});
  check_case({2, 2, 130, 130, 4, 3, true, LinearFeature::EluPlusOne, {70, 0}});
}

TEST_CASE("linear attention: padded keys are zeroed after the feature map, so their values cannot move the output") {
  LinearAttentionArgs a;
  a.key_lengths = {5, 9};
  Tensor q = uniform({2, 2, 6, 4}, 1), k = uniform({2, 2, 9, 4}, 2), v = uniform({2, 2, 9, 3}, 3);
  Tensor y = linear_attention(q, k, v, a);
  Tensor k2 = k.clone(), v2 = v.clone();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 5; j < 9; ++j) {
      for (int64_t m = 0; m < 4; ++m) k2.data<double>()[(h * 9 + j) * 4 + m] = 1e9;
      for (int64_t m = 0; m < 3; ++m) v2.data<double>()[(h * 9 + j) * 3 + m] = 1e9;
    }
  CHECK(eng::test::max_abs_diff(linear_attention(q, k2, v2, a), y) == 0.0);
  // Zeroing raw k instead would leak: elu(0) + 1 = 1 gives the padding weight.
  LinearAttentionArgs none;
  Tensor k0 = k.clone(), v0 = v.clone();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 5; j < 9; ++j)
      for (int64_t m = 0; m < 4; ++m) k0.data<double>()[(h * 9 + j) * 4 + m] = 0;
  CHECK(eng::test::max_abs_diff(linear_attention(q, k0, v0, none), y) > 1e-3);
}

TEST_CASE("linear attention: eps is added after the dot product, and an all-zero relu row stays finite") {
  LinearAttentionArgs a;
  a.feature = LinearFeature::Relu;
  a.eps = 0.5;
  Tensor q = from_vector({1.0, 0.0}, {1, 1, 1, 2}, DType::F64);
  Tensor k = from_vector({2.0, 3.0, 1.0, 0.0}, {1, 1, 2, 2}, DType::F64);
  Tensor v = from_vector({10.0, 20.0}, {1, 1, 2, 1}, DType::F64);
  // φ(q)·φ(k) = 2 and 1: (2*10 + 1*20) / (3 + 0.5).
  CHECK(linear_attention(q, k, v, a).item() == doctest::Approx(40.0 / 3.5));
  Tensor qneg = from_vector({-1.0, -2.0}, {1, 1, 1, 2}, DType::F64);  // relu(q) = 0: 0 / eps
  CHECK(linear_attention(qneg, k, v, a).item() == 0.0);
}

TEST_CASE("linear attention: shape errors name the op and both shapes") {
  Tensor q = uniform({1, 2, 5, 4}, 1), k = uniform({1, 2, 6, 4}, 2), v = uniform({1, 2, 6, 3}, 3);
  CHECK_THROWS_WITH(causal_linear_attention(q, k, v),
                    doctest::Contains("causal_linear_attention: causal attention needs as many queries as keys"));
  CHECK_THROWS_WITH(linear_attention(q, uniform({1, 2, 6, 5}, 2), v), doctest::Contains("linear_attention: q [1, 2, 5, 4]"));
  LinearAttentionArgs a;
  a.key_lengths = {7};
  CHECK_THROWS_WITH(linear_attention(q, k, v, a), doctest::Contains("key length 7 outside [0, 6]"));
}

TEST_CASE("causal linear attention: backward keeps no per-position state (memory grows linearly)") {
  // Peak bytes of forward + backward at N and 4N; a stored state sequence or N x N buffer would grow 16x.
  auto peak = [](int64_t N) {
    Tensor q = uniform({1, 2, N, 16}, 1).to(DType::F32).set_requires_grad(true);
    Tensor k = uniform({1, 2, N, 16}, 2).to(DType::F32).set_requires_grad(true);
    Tensor v = uniform({1, 2, N, 16}, 3).to(DType::F32).set_requires_grad(true);
    allocator::empty_cache();  // a cached block larger than a request would count in full
    const int64_t before = allocator::stats().live_bytes;
    allocator::reset_peak();
    sum(causal_linear_attention(q, k, v)).backward();
    return allocator::stats().peak_bytes - before;
  };
  const int64_t small = peak(1024), large = peak(4096);
  CHECK(double(large) / double(small) <= 4.5);
  const int64_t N = 16384;
  CHECK(peak(N) < N * N * 4);
}

TEST_CASE("linear attention: an output gradient of any strides (broadcast, transposed) == its contiguous copy") {
  for (bool causal : {false, true}) {
    const int64_t B = 2, H = 2, N = 70, M = 5, Dv = 6;  // 70: past one chunk of 64
    Tensor q = uniform({B, H, N, M}, 1).to(DType::F32), k = uniform({B, H, N, M}, 2).to(DType::F32);
    Tensor v = uniform({B, H, N, Dv}, 3).to(DType::F32);
    const Tensor given[] = {expand(reshape(uniform({Dv}, 4).to(DType::F32), {1, 1, 1, Dv}), {B, H, N, Dv}),
                            transpose(uniform({B, H, Dv, N}, 5).to(DType::F32), 2, 3)};
    for (int which = 0; which < 2; ++which) {
      const Tensor& g = given[which];
      INFO("causal ", causal, which ? " transposed" : " broadcast", " gradient");
      std::vector<Tensor> grads[2];
      for (int copy = 0; copy < 2; ++copy) {
        Tensor qr = q.detach().set_requires_grad(true), kr = k.detach().set_requires_grad(true);
        Tensor vr = v.detach().set_requires_grad(true);
        Tensor y = causal ? causal_linear_attention(qr, kr, vr) : linear_attention(qr, kr, vr);
        y.backward(copy ? g.contiguous() : g);
        grads[copy] = {qr.grad(), kr.grad(), vr.grad()};
      }
      for (int i = 0; i < 3; ++i) CHECK(grads[0][size_t(i)].to_vector() == grads[1][size_t(i)].to_vector());
    }
  }
}

TEST_CASE("causal linear attention in f32 at 64-wide heads == f64, across chunks, for any output gradient") {
  // 64 x 64 heads take the f32 SIMD paths (the 14 x 32 tiles of the triangle products, the SIMD dots, the elu
  // backward of ∇q); N = 150 is two chunks of 56 and a part. The gradient of a sum is a scalar broadcast (column
  // stride 0), which must give the bits of its contiguous copy.
  const int64_t B = 1, H = 2, N = 150, M = 64, Dv = 64;
  const std::vector<Tensor> x = {uniform({B, H, N, M}, 1, -2, 2), uniform({B, H, N, M}, 2, -2, 2),
                                 uniform({B, H, N, Dv}, 3)};
  for (int broadcast = 0; broadcast < 2; ++broadcast) {
    CAPTURE(broadcast);
    std::vector<Tensor> got[3];  // f64, f32, f32 with the gradient copied contiguous
    for (int run = 0; run < 3; ++run) {
      const DType dt = run == 0 ? DType::F64 : DType::F32;
      const Tensor g = broadcast ? expand(reshape(uniform({1}, 5).to(dt), {1, 1, 1, 1}), {B, H, N, Dv})
                                 : uniform({B, H, N, Dv}, 4).to(dt);
      std::vector<Tensor> l;
      for (const Tensor& t : x) l.push_back(t.to(dt).detach().set_requires_grad(true));
      Tensor y = causal_linear_attention(l[0], l[1], l[2]);
      y.backward(run == 2 ? g.contiguous() : g);
      got[run] = {y.detach(), l[0].grad(), l[1].grad(), l[2].grad()};
    }
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(eng::test::allclose(got[1][i].to(DType::F64), got[0][i], 1e-4, 1e-5));
      CHECK(got[1][i].to_vector() == got[2][i].to_vector());
    }
  }
}

TEST_CASE("linear attention step == the causal parallel form at every position; cross form reads a fixed state") {
  const int64_t B = 2, H = 2, N = 9, M = 4, Dv = 3;
  Tensor q = uniform({B, H, N, M}, 1), k = uniform({B, H, N, M}, 2), v = uniform({B, H, N, Dv}, 3);
  Tensor want = causal_linear_attention(q, k, v);
  Tensor s = zeros({B, H, M, Dv}, DType::F64), z = zeros({B, H, M}, DType::F64);
  for (int64_t i = 0; i < N; ++i) {
    Tensor y = linear_attention_step(narrow(q, 2, i, 1), narrow(k, 2, i, 1), narrow(v, 2, i, 1), s, z);
    CHECK(eng::test::allclose(y, narrow(want, 2, i, 1), 1e-12, 1e-13));
  }
  // With the whole sequence absorbed, a query alone sees all keys: the non-causal form.
  Tensor q1 = uniform({B, H, 1, M}, 4);
  CHECK(eng::test::allclose(linear_attention_step(q1, Tensor(), Tensor(), s, z), linear_attention(q1, k, v), 1e-12,
                            1e-13));
}

GRADCHECK("linear_attention") {
  LinearAttentionArgs a;
  a.key_lengths = {3, 5};
  check_gradients([a](const std::vector<Tensor>& x) { return linear_attention(x[0], x[1], x[2], a); },
                  {uniform({2, 2, 4, 3}, 1), uniform({2, 2, 5, 3}, 2), uniform({2, 2, 5, 2}, 3)});
}

GRADCHECK("causal_linear_attention") {
  for (int64_t N : {6, 70})
    check_gradients([](const std::vector<Tensor>& x) { return causal_linear_attention(x[0], x[1], x[2]); },
                    {uniform({1, 2, N, 3}, 1), uniform({1, 2, N, 3}, 2), uniform({1, 2, N, 2}, 3)});
}
