// bf16 mixed precision (ops/mixed_precision.h) against two references that share no code with it: central
// differences of the same function in f64 (at bf16's tolerance), and gemm_bf16_reference for the products'
// bits. Also that the scope reaches exactly the ops it names and that a backward keeps its forward's precision.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "ops/attention_flash.h"
#include "ops/binary.h"
#include "ops/gemm.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/mixed_precision.h"
#include "ops/norm.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::uniform;

namespace {

// C = A·B by gemm_bf16_reference, A [M, K] and B [K, N] contiguous f32.
Tensor reference_product(const Tensor& a, const Tensor& b) {
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor c = zeros({a.size(0), b.size(1)});
  GemmArgs<float> g;
  g.M = a.size(0), g.N = b.size(1), g.K = a.size(1);
  g.A = ac.data<float>(), g.a_rs = g.K, g.a_cs = 1;
  g.B = bc.data<float>(), g.b_rs = g.N, g.b_cs = 1;
  g.C = c.data<float>(), g.c_rs = g.N;
  gemm_bf16_reference(g);
  return c;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector()) m = std::max(m, std::fabs(x));
  return m;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  return x == y;
}

// A small network through every op the scope reaches and the f32 ones beside them: Linear-style products, flash
// attention (causal), layer norm, cross-entropy. Inputs: x [2, 6, 8], w_in [8, 24], w_out [8, 5], ln [8].
Tensor network(const std::vector<Tensor>& in, const Tensor& targets) {
  const Tensor& x = in[0];
  const Tensor qkv = reshape(matmul(x, in[1]), {2, 6, 3, 2, 4});  // [B, L, (q k v), H, D]
  auto head = [&](int64_t i) { return permute(squeeze(narrow(qkv, 2, i, 1), 2), {0, 2, 1, 3}); };
  AttentionMask mask;
  mask.causal = true;
  const Tensor att = reshape(permute(flash_attention(head(0), head(1), head(2), mask, 0.5), {0, 2, 1, 3}), {2, 6, 8});
  const Tensor h = layer_norm(add(x, att), in[3], Tensor());
  return cross_entropy(reshape(matmul(h, in[2]), {12, 5}), targets);
}

std::vector<Tensor> network_inputs(DType t) {
  std::vector<Tensor> in = {uniform({2, 6, 8}, 1), uniform({8, 24}, 2), uniform({8, 5}, 3), uniform({8}, 4, 0.5, 1.5)};
  for (Tensor& x : in) x = x.to(t).set_requires_grad();
  return in;
}

Tensor network_targets() {
  Tensor t = empty({12}, DType::I64);
  for (int64_t i = 0; i < 12; ++i) t.data<int64_t>()[i] = (i * 7) % 5;
  return t;
}

}  // namespace

TEST_CASE("mixed precision: --precision takes fp32 or bf16 and names the flag otherwise") {
  CHECK(parse_precision("fp32", "--precision") == GemmPrecision::F32);
  CHECK(parse_precision("bf16", "--precision") == GemmPrecision::Bf16);
  CHECK_THROWS_WITH_AS(parse_precision("fp16", "--precision"), "--precision: 'fp16' is not a precision; use fp32 or bf16",
                       Error);
  CHECK(matmul_precision() == GemmPrecision::F32);
  {
    PrecisionScope s(GemmPrecision::Bf16);
    CHECK(matmul_precision() == GemmPrecision::Bf16);
  }
  CHECK(matmul_precision() == GemmPrecision::F32);
}

TEST_CASE("mixed precision: matmul forward and both backward products are bf16 products, bit for bit") {
  const Tensor a = uniform({37, 29}, 5).to(DType::F32).set_requires_grad();
  const Tensor b = uniform({29, 45}, 6).to(DType::F32).set_requires_grad();
  const Tensor g = uniform({37, 45}, 7).to(DType::F32);
  Tensor y;
  {
    PrecisionScope s(GemmPrecision::Bf16);
    y = matmul(a, b);
  }
  y.backward(g);  // outside the scope: the op keeps the precision it was recorded with
  CHECK(same_bits(y, reference_product(a.detach(), b.detach())));
  CHECK(same_bits(a.grad(), reference_product(g, transpose(b.detach()))));
  CHECK(same_bits(b.grad(), reference_product(transpose(a.detach()), g)));
  CHECK(!same_bits(y, matmul(a.detach(), b.detach())));  // f32 outside the scope: other bits
}

TEST_CASE("mixed precision: f64 tensors ignore the scope") {
  const Tensor a = uniform({5, 7}, 1), b = uniform({7, 3}, 2);
  const Tensor f32 = matmul(a.to(DType::F32), b.to(DType::F32));
  PrecisionScope s(GemmPrecision::Bf16);
  CHECK(eng::test::max_abs_diff(matmul(a, b), f32.to(DType::F64)) < 1e-6);
  CHECK(eng::test::max_abs_diff(matmul(a.to(DType::F32), b.to(DType::F32)), f32) > 1e-4);  // f32 takes bf16
}

TEST_CASE("mixed precision: a network's gradients in bf16 == central differences in f64, within bf16's error") {
  const Tensor targets = network_targets();
  std::vector<Tensor> in32 = network_inputs(DType::F32), in32_ref = network_inputs(DType::F32);
  {
    PrecisionScope s(GemmPrecision::Bf16);
    network(in32, targets).backward();
  }
  network(in32_ref, targets).backward();
  std::vector<Tensor> in64 = network_inputs(DType::F64);
  const double eps = 1e-6;
  for (size_t i = 0; i < in64.size(); ++i) {
    const Tensor x = in64[i].detach();
    double worst = 0, worst_f32 = 0, scale = 0;
    for (int64_t e = 0; e < x.numel(); ++e) {
      double* p = x.data<double>() + e;
      const double saved = *p;
      *p = saved + eps;
      const double up = network(in64, targets).item();
      *p = saved - eps;
      const double down = network(in64, targets).item();
      *p = saved;
      const double fd = (up - down) / (2 * eps);
      scale = std::max(scale, std::fabs(fd));
      worst = std::max(worst, std::fabs(in32[i].grad().to_vector()[size_t(e)] - fd));
      worst_f32 = std::max(worst_f32, std::fabs(in32_ref[i].grad().to_vector()[size_t(e)] - fd));
    }
    INFO("input ", i, ": largest |gradient| ", scale, ", error bf16 ", worst, ", f32 ", worst_f32);
    // bf16 keeps 8 significant bits: each product's operands err by up to 2^-9 relative, a few products deep.
    CHECK(worst <= 0x1p-5 * scale);
    CHECK(worst > worst_f32);  // the bf16 path was taken: it is measurably less exact than f32
    CHECK(worst_f32 <= 1e-4 * scale);
  }
}

TEST_CASE("mixed precision: flash attention's tile products are bf16 forward and backward") {
  const Tensor q = uniform({1, 2, 70, 16}, 11).to(DType::F32).set_requires_grad();
  const Tensor k = uniform({1, 2, 70, 16}, 12).to(DType::F32).set_requires_grad();
  const Tensor v = uniform({1, 2, 70, 16}, 13).to(DType::F32).set_requires_grad();
  const Tensor g = uniform({1, 2, 70, 16}, 14).to(DType::F32);
  Tensor y32 = flash_attention(q, k, v, AttentionMask{}, 0.25), y16;
  y32.backward(g);
  const std::vector<Tensor> grads32 = {q.grad(), k.grad(), v.grad()};
  for (const Tensor& t : {q, k, v}) t.zero_grad();
  {
    PrecisionScope s(GemmPrecision::Bf16);
    y16 = flash_attention(q, k, v, AttentionMask{}, 0.25);
  }
  y16.backward(g);
  const std::vector<Tensor> grads16 = {q.grad(), k.grad(), v.grad()};
  const double dy = eng::test::max_abs_diff(y16, y32);
  CHECK(dy > 0);
  CHECK(dy < 0x1p-6);
  for (size_t i = 0; i < 3; ++i) {
    INFO("gradient ", i);
    const double d = eng::test::max_abs_diff(grads16[i], grads32[i]);
    CHECK(d > 0);
    CHECK(d < 0x1p-5 * max_abs(grads32[i]));
  }
}
