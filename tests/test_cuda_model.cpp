// The ops, autograd and Adam on CUDA tensors (ops/cuda/dispatch.h) against the same f32 computation on the
// CPU: copies between strided views, gradient accumulation, each dispatched op forward and backward, and a
// 2-layer transformer language model (loss, every parameter gradient, Adam steps). Without a usable device
// the first case prints why and checks the refusals (Module::to); every other case returns at once.
//
// Tolerances, against the CPU in f32 (both sides round; the GPU sums in other orders, fp32 GEMM tiles, its
// own exp/erf): elementwise results within 1e-5 relative; everything else within 1e-4 of the largest entry
// of the reference (at least 1): K-term f32 dot products carry ~sqrt(K) 2^-24 relative error per side, a
// few 1e-6 at these sizes, and the model's gradients pass through 2 layers of them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/cuda.h"
#include "engine/error.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "models/attention/attention.h"
#include "models/transformer.h"
#include "ops/activation.h"
#include "ops/attention_flash.h"
#include "ops/bias_activation.h"
#include "ops/binary.h"
#include "ops/dropout.h"
#include "ops/index.h"
#include "ops/linear_attention.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
#include "ops/unary.h"
#include "ops/view.h"
#include "tests/cuda_test_util.h"

using namespace eng;
using namespace eng::cuda_test;

namespace {

// got within rtol |want| + tol * max(1, max |want|) of want, element by element.
void check_scaled(const Tensor& got, const Tensor& want, double rtol, double tol, const std::string& what) {
  check_close(got, want, rtol, tol * std::max(1.0, max_abs(want)), what);
}

using Inputs = std::vector<Tensor>;

// Runs f on CPU copies of `inputs` and on device copies (floating inputs requiring grad), backpropagates one
// random output gradient through both, and compares the outputs and the inputs' gradients.
void check_op(const std::string& what, const Inputs& inputs, const std::function<Tensor(const Inputs&)>& f,
              double rtol = 1e-5, double tol = 1e-4) {
  Inputs c, d;
  for (const Tensor& t : inputs) {
    Tensor ct = t.clone(), dt = dev(t);
    if (is_floating(t.dtype())) {
      ct.set_requires_grad();
      dt.set_requires_grad();
    }
    c.push_back(ct);
    d.push_back(dt);
  }
  const Tensor yc = f(c), yd = f(d);
  REQUIRE(yd.device() == Device::CUDA);
  check_scaled(yd, yc, rtol, tol, what + ": forward");
  Rng rng(5);
  const Tensor dy = randn(yc.shape(), rng);
  yc.backward(dy);
  yd.backward(dev(dy));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!c[i].grad().defined()) continue;
    REQUIRE(d[i].grad().defined());
    CHECK(d[i].grad().device() == Device::CUDA);
    check_scaled(d[i].grad(), c[i].grad(), rtol, tol, what + ": gradient of input " + std::to_string(i));
  }
}

TransformerConfig lm_config() {
  TransformerConfig c;
  c.vocab = 13;
  c.d_model = 32;
  c.heads = 2;
  c.d_ff = 64;
  c.decoder_layers = 2;
  c.max_len = 16;
  c.seed = 3;
  return c;
}

Tensor lm_loss(const LanguageModel& m, const Tensor& ids, const Tensor& targets) {
  const Tensor logits = m.forward(ids);
  return cross_entropy(reshape(logits, {-1, logits.size(-1)}), reshape(targets, {-1}), -100);
}

}  // namespace

TEST_CASE("cuda model: availability, and Module::to refuses without a device") {
  if (have_device()) return;  // tests/test_cuda.cpp says once that the CUDA tests are skipped
  LanguageModel m(lm_config());
  m.to(Device::CPU);  // already there: nothing moves
  CHECK(m.parameters().front().device() == Device::CPU);
  CHECK_THROWS_WITH_AS(m.to(Device::CUDA), doctest::Contains("Module::to(cuda): "), Error);
  CHECK(m.parameters().front().device() == Device::CPU);
}

TEST_CASE("cuda: strided views are copied on the device") {
  if (!have_device()) return;
  Rng rng(1);
  const Tensor x = randn({3, 4, 5}, rng);
  const Tensor d = dev(x);
  const std::vector<std::function<Tensor(const Tensor&)>> views{
      [](const Tensor& t) { return transpose(t, 0, 2); },
      [](const Tensor& t) { return permute(t, {2, 0, 1}); },
      [](const Tensor& t) { return slice(t, 1, 1, 4, 2); },
      [](const Tensor& t) { return narrow(transpose(t, 1, 2), 2, 1, 2); },
      [](const Tensor& t) { return expand(unsqueeze(narrow(t, 0, 1, 1), 0), {2, 1, 4, 5}); },
  };
  for (size_t i = 0; i < views.size(); ++i) {
    CAPTURE(i);
    const Tensor want = views[i](x).contiguous();
    const Tensor got = views[i](d).contiguous();
    CHECK(got.device() == Device::CUDA);
    CHECK(got.is_contiguous());
    CHECK(bitwise_equal(got, want));
    CHECK(bitwise_equal(to_device(views[i](d), Device::CPU), want));  // gathered on the device, then copied
  }
  // Scatter: writes into a strided device view, from the device and from the host.
  Tensor dst = dev(zeros({4, 6}));
  const Tensor src = randn({4, 3}, rng);
  slice(dst, 1, 0, 6, 2).copy_from(dev(src));
  slice(dst, 1, 1, 6, 2).copy_from(transpose(transpose(src, 0, 1).contiguous(), 0, 1));
  Tensor want = zeros({4, 6});
  slice(want, 1, 0, 6, 2).copy_from(src);
  slice(want, 1, 1, 6, 2).copy_from(src);
  CHECK(bitwise_equal(dst, want));
  // concat joins on the device through the same copies
  CHECK(bitwise_equal(concat({d, transpose(transpose(d, 0, 1).contiguous(), 0, 1)}, 1), concat({x, x}, 1)));
}

TEST_CASE("cuda: gradients accumulate on the device") {
  if (!have_device()) return;
  Rng rng(2);
  const Tensor x = randn({5, 7}, rng);
  Tensor xc = x.clone().set_requires_grad(), xd = dev(x).set_requires_grad();
  for (const Tensor& t : {xc, xd}) {
    const Tensor h = mul_scalar(t, 3.0);  // used twice: its two gradients are summed before it passes them on
    const Tensor y = add(mul(h, h), transpose(transpose(h, 0, 1), 0, 1));
    sum(y).backward();
    sum(mul(t, t)).backward();  // a second backward adds into the leaf's gradient
  }
  REQUIRE(xd.grad().device() == Device::CUDA);
  check_close(xd.grad(), xc.grad(), 1e-5, 1e-6, "accumulated gradient");
}

TEST_CASE("cuda: the dispatched ops match the CPU forward and backward") {
  if (!have_device()) return;
  Rng rng(3);
  auto r = [&](const Shape& s) { return randn(s, rng); };
  check_op("add", {r({4, 5}), r({4, 5})}, [](const Inputs& v) { return add(v[0], v[1]); });
  check_op("add bias row", {r({2, 3, 5}), r({5})}, [](const Inputs& v) { return add(v[0], v[1]); });
  check_op("add table", {r({2, 3, 5}), r({3, 5})}, [](const Inputs& v) { return add(v[0], v[1]); });
  check_op("add row first", {r({5}), r({3, 5})}, [](const Inputs& v) { return add(v[0], v[1]); });
  check_op("sub bias row", {r({3, 5}), r({5})}, [](const Inputs& v) { return sub(v[0], v[1]); });
  check_op("mul bias row", {r({3, 5}), r({5})}, [](const Inputs& v) { return mul(v[0], v[1]); });
  check_op("div", {r({3, 5}), add_scalar(rand({3, 5}, rng), 0.5)}, [](const Inputs& v) { return div(v[0], v[1]); });
  check_op("scalars", {r({3, 5})}, [](const Inputs& v) { return add_scalar(mul_scalar(v[0], -1.5), 0.25); });
  check_op("exp", {r({37})}, [](const Inputs& v) { return exp(v[0]); });
  check_op("log", {add_scalar(rand({37}, rng), 0.1)}, [](const Inputs& v) { return log(v[0]); });
  check_op("tanh", {r({37})}, [](const Inputs& v) { return tanh(v[0]); });
  check_op("relu", {r({37})}, [](const Inputs& v) { return relu(v[0]); });
  check_op("gelu", {r({37})}, [](const Inputs& v) { return gelu(v[0]); });
  check_op("gelu tanh", {r({37})}, [](const Inputs& v) { return gelu(v[0], GeluForm::Tanh); });
  check_op("elu", {r({37})}, [](const Inputs& v) { return elu(v[0]); });
  check_op("sigmoid", {r({37})}, [](const Inputs& v) { return sigmoid(v[0]); });
  check_op("silu", {r({37})}, [](const Inputs& v) { return silu(v[0]); });
  for (BiasActivation act : {BiasActivation::None, BiasActivation::Relu, BiasActivation::GeluErf,
                             BiasActivation::GeluTanh}) {
    check_op("bias_activation", {r({2, 3, 9}), r({9})},
             [act](const Inputs& v) { return bias_activation(v[0], v[1], act); });
  }
  check_op("matmul batched", {r({2, 3, 4, 5}), r({2, 3, 5, 6})}, [](const Inputs& v) { return matmul(v[0], v[1]); });
  check_op("matmul linear", {r({2, 7, 5}), r({6, 5})},
           [](const Inputs& v) { return matmul(v[0], transpose(v[1], 0, 1)); });
  check_op("matmul transposed operands", {r({3, 5, 4}), r({3, 6, 5})},
           [](const Inputs& v) { return matmul(transpose(v[0], 1, 2), transpose(v[1], 1, 2)); });
  check_op("matmul broadcast a", {r({4, 5}), r({3, 5, 6})}, [](const Inputs& v) { return matmul(v[0], v[1]); });
  check_op("matmul of head views", {r({2, 6, 8})}, [](const Inputs& v) {
    const Tensor h = transpose(reshape(v[0], {2, 6, 2, 4}), 1, 2);  // [B, H, L, Dh], as split_heads
    return matmul(h, transpose(h, 2, 3));
  });
  check_op("softmax", {r({4, 33})}, [](const Inputs& v) { return softmax(v[0], -1); });
  check_op("log_softmax", {r({4, 33})}, [](const Inputs& v) { return log_softmax(v[0], -1); });
  check_op("layer_norm", {r({2, 3, 32}), r({32}), r({32})},
           [](const Inputs& v) { return layer_norm(v[0], v[1], v[2]); });
  check_op("rms_norm", {r({6, 32}), r({32})}, [](const Inputs& v) { return rms_norm(v[0], v[1]); });
  check_op("add_layer_norm", {r({6, 32}), r({6, 32}), r({32}), r({32})}, [](const Inputs& v) {
    const AddNormResult a = add_layer_norm(v[0], v[1], v[2], v[3]);
    return add(a.normed, mul_scalar(a.sum, 0.5));
  });
  check_op("embedding", {r({11, 8}), from_vector({3, 0, 10, 3, 7, 3}, {2, 3}, DType::I64)},
           [](const Inputs& v) { return embedding(v[0], v[1]); });
  check_op("cross_entropy", {r({6, 13}), from_vector({1, 12, -100, 0, 5, 5}, {6}, DType::I64)},
           [](const Inputs& v) { return cross_entropy(v[0], v[1], -100); });
  check_op("sum over leading axes", {r({3, 4, 5})}, [](const Inputs& v) { return sum(v[0], {0, 1}); });
  check_op("dropout", {r({4, 50})}, [](const Inputs& v) {
    Rng local(7);
    return dropout(v[0], 0.3, local, true);
  });
  for (bool causal : {false, true}) {
    check_op("flash_attention", {r({2, 9, 2, 8}), r({2, 9, 2, 8}), r({2, 9, 2, 8})}, [causal](const Inputs& v) {
      AttentionMask mask;
      mask.causal = causal;
      // [B, L, H, D] -> [B, H, L, D]: strided views, as the model's split heads
      return flash_attention(transpose(v[0], 1, 2), transpose(v[1], 1, 2), transpose(v[2], 1, 2), mask, 0.35);
    });
  }
  check_op("causal_linear_attention elu + 1", {r({2, 2, 37, 8}), r({2, 2, 37, 8}), r({2, 2, 37, 6})},
           [](const Inputs& v) { return causal_linear_attention(v[0], v[1], v[2]); });
  const Tensor pos_q = add_scalar(rand({1, 3, 40, 5}, rng), 0.1), pos_k = add_scalar(rand({1, 3, 40, 5}, rng), 0.1);
  check_op("causal_linear_attention identity", {pos_q, pos_k, r({1, 3, 40, 7})}, [](const Inputs& v) {
    LinearAttentionArgs args;
    args.feature = LinearFeature::Identity;
    return causal_linear_attention(v[0], v[1], v[2], args);
  });
}

TEST_CASE("cuda: ops without a cuda form refuse cuda tensors with the op's name") {
  if (!have_device()) return;
  Rng rng(4);
  const Tensor d = dev(randn({3, 4}, rng));
  CHECK_THROWS_WITH_AS(sqrt(d), doctest::Contains("sqrt: tensor of shape [3, 4] is on cuda"), Error);
  CHECK_THROWS_WITH_AS(argmax(d, -1), doctest::Contains("argmax"), Error);
  CHECK_THROWS_WITH_AS(softmax(d, 0), doctest::Contains("only the last axis"), Error);
  CHECK_THROWS_WITH_AS(add(d, dev(randn({3, 1}, rng))), doctest::Contains("not supported on cuda yet"), Error);
  CHECK_THROWS_WITH_AS(add(d, randn({3, 4}, rng)), doctest::Contains("is on cpu"), Error);
  CHECK_THROWS_WITH_AS(exp(dev(randn({3}, rng, DType::F64))), doctest::Contains("f32 only"), Error);
}

TEST_CASE("cuda model: a 2-layer transformer LM matches the CPU: loss, gradients, Adam steps") {
  if (!have_device()) return;
  const TransformerConfig cfg = lm_config();
  LanguageModel cpu(cfg), gpu(cfg);
  gpu.to(Device::CUDA);
  for (const Tensor& p : gpu.parameters()) REQUIRE(p.device() == Device::CUDA);
  Rng rng(9);
  Tensor ids = empty({3, 10}, DType::I64), targets = empty({3, 10}, DType::I64);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    ids.data<int64_t>()[i] = int64_t(rng.uniform() * double(cfg.vocab));
    targets.data<int64_t>()[i] = i % 7 == 3 ? -100 : int64_t(rng.uniform() * double(cfg.vocab));
  }
  Adam cpu_opt(cpu.named_parameters(), 1e-3), gpu_opt(gpu.named_parameters(), 1e-3);
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    cpu.zero_grad();
    gpu.zero_grad();
    const Tensor lc = lm_loss(cpu, ids, targets), lg = lm_loss(gpu, dev(ids), targets);
    REQUIRE(lg.device() == Device::CUDA);
    CHECK(std::fabs(lg.item() - lc.item()) <= 1e-5 * std::fabs(lc.item()) + 1e-6);
    lc.backward();
    lg.backward();
    const auto pc = cpu.named_parameters(), pg = gpu.named_parameters();
    for (size_t i = 0; i < pc.size(); ++i) {
      REQUIRE(pg[i].second.grad().defined());
      CHECK(pg[i].second.grad().device() == Device::CUDA);
      check_scaled(pg[i].second.grad(), pc[i].second.grad(), 1e-3, 1e-4, "gradient of " + pc[i].first);
    }
    if (step == 2) break;
    // Adam from the same gradients on both sides (the CPU's), so that the steps compare the optimizers alone:
    // Adam divides by sqrt(v), which turns tiny differences in near-zero gradients into steps of up to lr.
    for (size_t i = 0; i < pc.size(); ++i) Tensor(pg[i].second).set_grad(dev(pc[i].second.grad()));
    cpu_opt.step();
    gpu_opt.step();
    for (size_t i = 0; i < pc.size(); ++i)
      check_close(pg[i].second, pc[i].second, 1e-5, 1e-7, "Adam on " + pc[i].first);
  }
}

TEST_CASE("cuda model: generation with the RNN form of causal linear attention matches the CPU at every step") {
  if (!have_device()) return;
  const int64_t B = 2, H = 3, N = 12, D = 8;
  Rng rng(21);
  const Tensor q = randn({B, H, N, D}, rng), k = randn({B, H, N, D}, rng), v = randn({B, H, N, D}, rng);
  auto attn = make_attention("causal-linear", AttentionConfig{});
  auto cpu_state = attn->new_state(), gpu_state = attn->new_state();
  AttentionMask causal;
  causal.causal = true;
  const Tensor parallel = attn->forward(q, k, v, causal);
  for (int64_t i = 0; i < N; ++i) {
    CAPTURE(i);
    const Tensor qi = narrow(q, 2, i, 1), ki = narrow(k, 2, i, 1), vi = narrow(v, 2, i, 1);
    const Tensor oc = attn->step(qi, ki, vi, *cpu_state, AttentionMask{});
    const Tensor og = attn->step(dev(qi), dev(ki), dev(vi), *gpu_state, AttentionMask{});
    REQUIRE(og.device() == Device::CUDA);
    // the device sums in another order than the CPU step: 1e-4, as the kernel's own test
    check_scaled(og, oc, 1e-4, 1e-4, "step " + std::to_string(i));
    check_scaled(og, narrow(parallel, 2, i, 1), 1e-4, 1e-4, "step " + std::to_string(i) + " against the parallel form");
  }
}
