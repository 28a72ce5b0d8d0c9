// The CUDA backend (engine/cuda.h, CUDA tensors, ops/cuda/kernels.h) against the CPU. Without a usable
// device (a build without CUDA=1, no driver, no GPU) the first case prints why and checks that CUDA
// requests fail cleanly; every other case then returns at once. The kernel cases exist only in CUDA=1
// builds. References are the CPU ops in f64 (or plain double loops), so a tolerance bounds the GPU's
// f32 error alone.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/cuda.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "engine/tensor.h"
#include "tests/cuda_test_util.h"
#include "tests/skip_note.h"

#ifdef ENG_CUDA
#include <algorithm>
#include <functional>
#include <memory>
#include <sstream>

#include "engine/optim.h"
#include "engine/vec_kernels.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/cuda/kernels.h"
#include "ops/index.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/softmax.h"
#include "ops/unary.h"
#include "ops/view.h"
#endif

using namespace eng;
using namespace eng::cuda_test;

TEST_CASE("cuda: availability, and clean refusals without a device") {
  if (have_device()) {
    CHECK(cuda::built());
    CHECK(cuda::unavailable_reason().empty());
    return;
  }
  eng::test::note_skip("CUDA tests: " + cuda::unavailable_reason());
  CHECK_FALSE(cuda::unavailable_reason().empty());
  if (!cuda::built()) {
    CHECK(cuda::device_count() == 0);
    CHECK_THROWS_WITH_AS(cuda::allocate(16), doctest::Contains("rebuild with make CUDA=1"), Error);
    CHECK_THROWS_WITH_AS(cuda::synchronize("test"), doctest::Contains("built without CUDA"), Error);
  }
  CHECK_THROWS_WITH_AS(empty_on({2, 3}, DType::F32, Device::CUDA), doctest::Contains("CUDA"), Error);
  CHECK_THROWS_WITH_AS(to_device(zeros({4}), Device::CUDA), doctest::Contains("CUDA"), Error);
}

TEST_CASE("cuda: empty_on and to_device on the CPU side") {
  Tensor t = empty_on({2, 3}, DType::F64, Device::CPU);
  CHECK(t.device() == Device::CPU);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.dtype() == DType::F64);
  Tensor z = zeros({3});
  CHECK(to_device(z, Device::CPU).impl() == z.impl());
  CHECK_THROWS_WITH_AS(t.device_data<double>(), doctest::Contains("not cuda"), Error);
  CHECK_THROWS_WITH_AS(empty_on({-1}, DType::F32, Device::CPU), doctest::Contains("negative size"), Error);
}

TEST_CASE("cuda: host-device round trips are bitwise, and CPU code cannot read device memory") {
  if (!have_device()) return;
  const double denormal = std::numeric_limits<float>::denorm_min();
  Tensor f = from_vector({1.5, -0.0, kNaN, kInf, -kInf, denormal, 3.25e-30}, {7}, DType::F32);
  Tensor d = from_vector({1e300, -1e-300, kNaN, 0.1}, {2, 2}, DType::F64);
  Tensor i = from_vector({-5, 0, 1LL << 40}, {3}, DType::I64);
  for (const Tensor& t : {f, d, i}) {
    Tensor g = dev(t);
    CHECK(g.device() == Device::CUDA);
    CHECK(g.dtype() == t.dtype());
    CHECK(bitwise_equal(g, t));
  }
  Tensor g = dev(f);
  CHECK_THROWS_WITH_AS(g.data<float>(), doctest::Contains("is on cuda; CPU code cannot read it"), Error);
  CHECK_THROWS_WITH_AS(g.raw_data(), doctest::Contains("to_device(t, Device::CPU)"), Error);
  CHECK_THROWS_WITH_AS(g.to(DType::F64), doctest::Contains("runs on the CPU"), Error);
  CHECK(g.device_data<float>() != nullptr);
  CHECK(g.at({0}) == 1.5);
  g.set_at({1}, 7.0);
  CHECK(g.at({1}) == 7.0);
  CHECK(dev(scalar_tensor(4.5)).item() == 4.5);
  CHECK(g.str().find("device=cuda") != std::string::npos);

  // A transposed CPU source is gathered on the way in; a transposed device view on the way out.
  Rng rng(3);
  Tensor x = randn({5, 7}, rng);
  Tensor xt = x.as_strided({7, 5}, {1, 7}, 0);
  CHECK(host(dev(xt)).to_vector() == xt.to_vector());
  Tensor gx = dev(x);
  CHECK(host(gx.as_strided({7, 5}, {1, 7}, 0)).to_vector() == xt.to_vector());
  CHECK(gx.as_strided({7, 5}, {1, 7}, 0).to_vector() == xt.to_vector());

  // copy_from across devices and on the device; clone and fill stay on the device.
  Tensor dst = empty_on({5, 7}, DType::F32, Device::CUDA);
  dst.copy_from(x.to(DType::F64));  // converted on the host
  CHECK(dst.to_vector() == x.to_vector());
  Tensor c = gx.clone();
  CHECK(c.device() == Device::CUDA);
  CHECK(c.storage() != gx.storage());
  CHECK(c.to_vector() == x.to_vector());
  Tensor back = zeros({7, 5}, DType::F64);
  back.copy_from(gx.as_strided({7, 5}, {1, 7}, 0));
  CHECK(back.to_vector() == xt.to_vector());
  CHECK_THROWS_WITH_AS(c.copy_from(gx.as_strided({5, 7}, {1, 5}, 0)), doctest::Contains("contiguous source"), Error);
  c.fill(0);
  CHECK(c.to_vector() == std::vector<double>(35, 0.0));
  c.fill(-2.5);
  CHECK(c.to_vector() == std::vector<double>(35, -2.5));
  CHECK_THROWS_WITH_AS(c.as_strided({7, 5}, {1, 7}, 0).fill(1), doctest::Contains("must be contiguous"), Error);
  Tensor e = empty_on({0, 3}, DType::F32, Device::CUDA);
  CHECK(host(e).shape() == Shape{0, 3});
}

TEST_CASE("cuda: the caching allocator counts live and peak bytes and reuses freed blocks") {
  if (!have_device()) return;
  cuda::empty_cache();
  const AllocatorStats s0 = cuda::stats();
  CHECK(s0.cached_bytes == 0);
  {
    Tensor a = empty_on({1000}, DType::F32, Device::CUDA);  // 4000 bytes, rounded up to 4096
    const AllocatorStats s1 = cuda::stats();
    CHECK(s1.live_bytes == s0.live_bytes + 4096);
    CHECK(s1.peak_bytes >= s1.live_bytes);
    CHECK(s1.allocs == s0.allocs + 1);
  }
  const AllocatorStats s2 = cuda::stats();
  CHECK(s2.live_bytes == s0.live_bytes);
  CHECK(s2.cached_bytes == 4096);
  {
    Tensor b = empty_on({1024}, DType::F32, Device::CUDA);  // fits the freed block
    CHECK(cuda::stats().cache_hits == s2.cache_hits + 1);
    CHECK(cuda::stats().cached_bytes == 0);
    Tensor big = empty_on({3 << 18}, DType::F32, Device::CUDA);  // 3 MiB, rounded to 4 MiB
    CHECK(cuda::stats().live_bytes == s0.live_bytes + 4096 + (size_t(4) << 20));
  }
  cuda::reset_peak();
  CHECK(cuda::stats().peak_bytes == cuda::stats().live_bytes);
  cuda::empty_cache();
  CHECK(cuda::stats().cached_bytes == 0);
}

#ifdef ENG_CUDA

namespace {

using cuda::BinaryKind;
using cuda::GemmAlgo;
using cuda::UnaryKind;

const std::vector<Shape> kRowShapes = {{3, 1}, {37, 7}, {5, 33}, {4, 1000}, {3, 4097}};

}  // namespace

TEST_CASE("cuda: unary kernels and their derivatives match the CPU ops") {
  if (!have_device()) return;
  struct Case {
    UnaryKind kind;
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    double lo, hi;
  };
  const std::vector<Case> cases = {
      {UnaryKind::Exp, "exp", [](const Tensor& x) { return eng::exp(x); }, -6, 6},
      {UnaryKind::Log, "log", [](const Tensor& x) { return eng::log(x); }, 0.01, 6},
      {UnaryKind::Tanh, "tanh", [](const Tensor& x) { return eng::tanh(x); }, -6, 6},
      {UnaryKind::Sigmoid, "sigmoid", [](const Tensor& x) { return sigmoid(x); }, -6, 6},
      {UnaryKind::Relu, "relu", [](const Tensor& x) { return relu(x); }, -6, 6},
      {UnaryKind::Gelu, "gelu", [](const Tensor& x) { return gelu(x, GeluForm::Erf); }, -6, 6},
      {UnaryKind::GeluTanh, "gelu_tanh", [](const Tensor& x) { return gelu(x, GeluForm::Tanh); }, -6, 6},
      {UnaryKind::Silu, "silu", [](const Tensor& x) { return silu(x); }, -6, 6},
      {UnaryKind::Elu, "elu", [](const Tensor& x) { return elu(x, 1.0); }, -6, 6},
      {UnaryKind::EluPlusOne, "elu_plus_one", [](const Tensor& x) { return elu(x, 1.0) + 1.0; }, -6, 6},
  };
  Rng rng(11);
  for (const Case& c : cases)
    for (int64_t n : {1, 7, 4097}) {
      Tensor x = rand({n}, rng, DType::F32, c.lo, c.hi), dy = randn({n}, rng);
      Tensor y = empty_on({n}, DType::F32, Device::CUDA), dx = empty_on({n}, DType::F32, Device::CUDA);
      Tensor gx = dev(x);
      cuda::unary(c.kind, dptr(gx), dptr(y), n);
      cuda::unary_backward(c.kind, dptr(gx), dptr(dev(dy)), dptr(dx), n);
      // f32 rounding of the intermediate terms: 1e-5 relative, and 1e-6 absolute where the exact value is
      // a cancellation near zero (the derivatives of tanh, sigmoid and gelu in the tails)
      check_close(y, c.f(f64(x)), 1e-5, 1e-6, std::string(c.name) + " forward");
      check_close(dx, cpu_grad(c.f, x, dy), 1e-5, 1e-6, std::string(c.name) + " backward");
    }
}

TEST_CASE("cuda: binary kernels match the CPU ops, with a broadcast bias row") {
  if (!have_device()) return;
  Rng rng(12);
  for (const Shape& s : kRowShapes) {
    Tensor a = randn(s, rng), b = rand(s, rng, DType::F32, 0.5, 2), row = rand({s[1]}, rng, DType::F32, 0.5, 2);
    for (bool bias : {false, true}) {
      const Tensor& rhs = bias ? row : b;
      const std::vector<std::pair<BinaryKind, Tensor>> cases = {{BinaryKind::Add, add(a, rhs)},
                                                                {BinaryKind::Sub, sub(a, rhs)},
                                                                {BinaryKind::Mul, mul(a, rhs)},
                                                                {BinaryKind::Div, div(a, rhs)}};
      for (const auto& [kind, want] : cases) {
        Tensor out = empty_on(s, DType::F32, Device::CUDA);
        cuda::binary(kind, dptr(dev(a)), dptr(dev(rhs)), dptr(out), a.numel(), rhs.numel());
        check_close(out, want, 1e-6, 0, "binary");  // one IEEE operation per element on both sides
      }
    }
  }
}

TEST_CASE("cuda: softmax rows match the CPU, masked rows included") {
  if (!have_device()) return;
  Rng rng(13);
  for (const Shape& s : kRowShapes)
    for (bool log : {false, true}) {
      Tensor x = randn(s, rng) * 3.0, dy = randn(s, rng);
      for (int64_t j = 0; j < s[1]; ++j) x.set_at({0, j}, -kInf);  // a fully masked row
      x.set_at({1, 0}, -kInf);                                      // and one masked entry
      auto f = [log](const Tensor& t) { return log ? log_softmax(t, -1) : softmax(t, -1); };
      Tensor y = empty_on(s, DType::F32, Device::CUDA), dx = empty_on(s, DType::F32, Device::CUDA);
      cuda::softmax_rows(dptr(dev(x)), dptr(y), s[0], s[1], log);
      cuda::softmax_rows_backward(dptr(y), dptr(dev(dy)), dptr(dx), s[0], s[1], log);
      // log-softmax is compared absolutely too: log(sum) of a near-1 sum has tiny values with f32 error
      check_close(y, f(f64(x)), 1e-5, log ? 1e-5 : 1e-7, log ? "log_softmax" : "softmax");
      check_close(dx, cpu_grad(f, x, dy), 1e-5, 1e-5, log ? "log_softmax backward" : "softmax backward");
    }
}

TEST_CASE("cuda: layer norm and RMS norm rows match the CPU, gradients deterministic") {
  if (!have_device()) return;
  Rng rng(14);
  const float eps = 1e-5f;
  for (int64_t rows : {1, 3, 37})
    for (int64_t cols : {1, 7, 33, 1000, 4097})
      for (bool rms : {false, true})
        for (bool affine : {false, true}) {
          const Shape s{rows, cols};
          Tensor x = randn(s, rng) + 3.0, dy = randn(s, rng);
          Tensor w = affine ? rand({cols}, rng, DType::F32, 0.5, 1.5) : Tensor();
          Tensor b = affine && !rms ? randn({cols}, rng) : Tensor();  // the CPU's rms_norm has no bias
          Tensor gw = w.defined() ? dev(w) : Tensor(), gb = b.defined() ? dev(b) : Tensor();
          float* wp = w.defined() ? dptr(gw) : nullptr;
          float* bp = b.defined() ? dptr(gb) : nullptr;
          Tensor gx = dev(x), gdy = dev(dy), y = empty_on(s, DType::F32, Device::CUDA);
          Tensor mean = empty_on({rows}, DType::F32, Device::CUDA), rstd = empty_on({rows}, DType::F32, Device::CUDA);
          cuda::layer_norm_rows(dptr(gx), wp, bp, dptr(y), dptr(mean), dptr(rstd), rows, cols, eps, rms);

          Tensor x64 = f64(x).set_requires_grad(), w64 = w.defined() ? f64(w).set_requires_grad() : Tensor();
          Tensor b64 = b.defined() ? f64(b).set_requires_grad() : Tensor();
          Tensor want = rms ? rms_norm(x64, w64, eps) : layer_norm(x64, w64, b64, eps);
          want.backward(f64(dy));
          check_close(y, want.detach(), 1e-5, 1e-5, rms ? "rms_norm" : "layer_norm");
          std::vector<double> mu(static_cast<size_t>(rows), 0.0), rs(static_cast<size_t>(rows));
          for (int64_t r = 0; r < rows; ++r) {
            double sx = 0, ss = 0;
            for (int64_t j = 0; j < cols; ++j) sx += x.at({r, j});
            if (!rms) mu[size_t(r)] = sx / double(cols);
            for (int64_t j = 0; j < cols; ++j) ss += (x.at({r, j}) - mu[size_t(r)]) * (x.at({r, j}) - mu[size_t(r)]);
            rs[size_t(r)] = 1 / std::sqrt(ss / double(cols) + eps);
          }
          check_close(mean, from_vector(mu, {rows}, DType::F64), 1e-5, 1e-6, "norm mean");
          check_close(rstd, from_vector(rs, {rows}, DType::F64), 1e-5, 0, "norm rstd");

          // dw and db start as NaN: they must be overwritten, not accumulated into
          Tensor dx = empty_on(s, DType::F32, Device::CUDA), dw = dev_full({cols}, kNaN), db = dev_full({cols}, kNaN);
          auto backward = [&] {
            cuda::layer_norm_rows_backward(dptr(gdy), dptr(gx), wp, dptr(mean), dptr(rstd), dptr(dx),
                                           w.defined() ? dptr(dw) : nullptr, b.defined() ? dptr(db) : nullptr, rows,
                                           cols, rms);
          };
          backward();
          // dx cancels three terms of size |dy w|: 1e-4 relative; dw, db sum up to 37 rows of them
          check_close(dx, x64.grad(), 1e-4, 1e-5, "norm dx");
          if (w.defined()) check_close(dw, w64.grad(), 1e-4, 1e-4, "norm dw");
          if (b.defined()) check_close(db, b64.grad(), 1e-4, 1e-4, "norm db");
          const Tensor dw1 = host(dw), db1 = host(db);
          backward();
          CHECK(bitwise_equal(dw, dw1));
          CHECK(bitwise_equal(db, db1));
        }
}

TEST_CASE("cuda: gemm matches a double loop for every transpose, batch stride, edge and beta") {
  if (!have_device()) return;
  struct Size {
    int64_t M, N, K, batch;
  };
  const bool tf32 = cuda::device_major() >= 8;
  Rng rng(15);
  for (const Size& z : {Size{1, 1, 1, 1}, Size{37, 129, 67, 3}, Size{130, 5, 300, 2}, Size{64, 64, 16, 1},
                        Size{200, 131, 9, 1}, Size{17, 19, 0, 2}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t M = z.M, N = z.N, K = z.K, batch = z.batch;
        // padded rows and batch strides, and one B shared by every batch (stride 0)
        const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
        const int64_t stride_a = (ta ? K : M) * lda + 5, stride_b = batch > 2 ? 0 : (tb ? N : K) * ldb,
                      stride_c = M * ldc + 7;
        Tensor A = rand({batch * stride_a}, rng, DType::F32, -1, 1);
        Tensor B = rand({std::max<int64_t>(1, (batch - 1) * stride_b + (tb ? N : K) * ldb)}, rng, DType::F32, -1, 1);
        Tensor C0 = rand({batch * stride_c}, rng, DType::F32, -1, 1);
        const float* pa = A.data<float>();
        const float* pb = B.data<float>();
        for (float beta : {0.f, 0.5f}) {
          const float alpha = 1.5f;
          std::vector<double> want(static_cast<size_t>(batch * stride_c));
          for (int64_t i = 0; i < batch * stride_c; ++i) want[size_t(i)] = beta == 0 ? kNaN : C0.data<float>()[i];
          for (int64_t bi = 0; bi < batch; ++bi)
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < N; ++n) {
                double acc = 0;
                for (int64_t k = 0; k < K; ++k)
                  acc += double(pa[bi * stride_a + (ta ? k * lda + m : m * lda + k)]) *
                         double(pb[bi * stride_b + (tb ? n * ldb + k : k * ldb + n)]);
                double& c = want[size_t(bi * stride_c + m * ldc + n)];
                c = alpha * acc + (beta == 0 ? 0.0 : beta * c);
              }
          // Typical size of an entry: sqrt(K) |a| |b| for random signs. fp32 sums stay within 1e-4 of it;
          // tf32 rounds each input to 11 significant bits (~5e-4), so ~1e-3 per product: 1e-2 of it.
          const double scale = alpha * std::sqrt(double(std::max<int64_t>(K, 1))) + beta;
          for (GemmAlgo algo : {GemmAlgo::Reference, GemmAlgo::Tiled, GemmAlgo::Tf32, GemmAlgo::Auto}) {
            Tensor C = beta == 0 ? dev_full({batch * stride_c}, kNaN) : dev(C0);
            auto run = [&] {
              cuda::gemm(ta, tb, M, N, K, alpha, dptr(dev(A)), lda, stride_a, dptr(dev(B)), ldb, stride_b, beta,
                         dptr(C), ldc, stride_c, batch, algo);
            };
            if (algo == GemmAlgo::Tf32 && !tf32) {
              CHECK_THROWS_WITH_AS(run(), doctest::Contains("compute capability 8.0"), Error);
              continue;
            }
            run();
            const bool low = algo == GemmAlgo::Tf32 || (algo == GemmAlgo::Auto && tf32);
            std::ostringstream what;
            what << "gemm algo " << int(algo) << " M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb
                 << " beta=" << beta;
            // the padding between rows and batches keeps its NaN or its old value
            check_close(C, from_vector(want, {batch * stride_c}, DType::F64), 0, (low ? 1e-2 : 1e-4) * scale,
                        what.str());
          }
        }
      }
}

TEST_CASE("cuda: cross-entropy rows match the CPU loss and its gradient") {
  if (!have_device()) return;
  Rng rng(16);
  const int64_t ignore = -100;
  for (int64_t rows : {3, 37})
    for (int64_t vocab : {1, 7, 33, 1000, 4097}) {
      Tensor logits = randn({rows, vocab}, rng) * 2.0;
      std::vector<double> t(static_cast<size_t>(rows));
      int64_t count = 0;
      for (int64_t r = 0; r < rows; ++r) {
        t[size_t(r)] = r % 3 == 1 ? double(ignore) : double(rng.below(uint64_t(vocab)));
        count += r % 3 != 1;
      }
      Tensor targets = from_vector(t, {rows}, DType::I64), gl = dev(logits), gt = dev(targets);
      Tensor loss = empty_on({rows}, DType::F32, Device::CUDA), lse = empty_on({rows}, DType::F32, Device::CUDA);
      cuda::cross_entropy_rows(dptr(gl), iptr(gt), dptr(loss), dptr(lse), rows, vocab, ignore);
      std::vector<double> want_loss(static_cast<size_t>(rows)), want_lse(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        double mx = -kInf, s = 0;
        for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, logits.at({r, j}));
        for (int64_t j = 0; j < vocab; ++j) s += std::exp(logits.at({r, j}) - mx);
        want_lse[size_t(r)] = mx + std::log(s);
        const int64_t tr = int64_t(t[size_t(r)]);
        want_loss[size_t(r)] = tr == ignore ? 0.0 : want_lse[size_t(r)] - logits.at({r, tr});
      }
      check_close(lse, from_vector(want_lse, {rows}, DType::F64), 1e-5, 1e-5, "lse");
      check_close(loss, from_vector(want_loss, {rows}, DType::F64), 1e-5, 2e-5, "cross-entropy loss");

      // The mean over the rows kept is the CPU op's value; dloss = 1 / count gives its gradient.
      Tensor l64 = f64(logits).set_requires_grad();
      Tensor mean_loss = cross_entropy(l64, targets, ignore);
      mean_loss.backward();
      double total = 0;
      for (double v : loss.to_vector()) total += v;
      CHECK(total / double(count) == doctest::Approx(mean_loss.item()).epsilon(1e-5));
      Tensor dlogits = empty_on({rows, vocab}, DType::F32, Device::CUDA);
      cuda::cross_entropy_rows_backward(dptr(gl), iptr(gt), dptr(lse), dptr(dev_full({rows}, 1.0 / double(count))),
                                        dptr(dlogits), rows, vocab, ignore);
      check_close(dlogits, l64.grad(), 1e-5, 1e-7, "cross-entropy gradient");
    }
}

TEST_CASE("cuda: adam_update is the CPU's f32 Adam and AdamW step") {
  if (!have_device()) return;
  Rng rng(17);
  const int64_t n = 4097;
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  for (bool decoupled : {false, true}) {
    const float wd = decoupled ? 0.1f : 0.01f;
    Tensor p = randn({n}, rng), m = zeros({n}), v = zeros({n});
    Tensor gp = dev(p), gm = dev(m), gv = dev(v);
    Tensor cpu_p = p.clone().set_requires_grad();
    std::unique_ptr<Optimizer> opt;
    if (decoupled)
      opt = std::make_unique<AdamW>(NamedTensors{{"p", cpu_p}}, lr, b1, b2, eps, wd);
    else
      opt = std::make_unique<Adam>(NamedTensors{{"p", cpu_p}}, lr, b1, b2, eps, wd);
    for (int64_t step = 1; step <= 3; ++step) {
      Tensor g = randn({n}, rng);
      cuda::adam_update(dptr(gp), dptr(dev(g)), dptr(gm), dptr(gv), n, lr, b1, b2, eps, wd, decoupled, step);
      // Bitwise against the scalar reference kernel, fed the coefficients Adam::update computes: both
      // sides do the same double operations in the same order, without fused multiply-adds.
      const double step_size = double(lr) / (1 - std::pow(double(b1), double(step)));
      const double bc2_sqrt = std::sqrt(1 - std::pow(double(b2), double(step)));
      const AdamStep s{float(decoupled ? 1 - double(lr) * double(wd) : 1.0), float(decoupled ? 0.0 : double(wd)), b1,
                       b2, float(step_size), float(1 / bc2_sqrt), eps, true};
      vec_kernels_for(SimdLevel::Scalar).adam(p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), n, s);
      CHECK(bitwise_equal(gp, p));
      CHECK(bitwise_equal(gm, m));
      CHECK(bitwise_equal(gv, v));
      // The optimizer itself (its SIMD kernel rounds in f32): a few ulp per step.
      cpu_p.set_grad(g);
      opt->step();
      check_close(gp, cpu_p.detach(), 1e-5, 1e-8, decoupled ? "AdamW" : "Adam");
    }
  }
}

TEST_CASE("cuda: embedding gather and scatter-add match the CPU op") {
  if (!have_device()) return;
  Rng rng(18);
  const int64_t vocab = 50, dim = 33, n = 37;
  Tensor weight = randn({vocab, dim}, rng), dout = randn({n, dim}, rng);
  std::vector<double> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = double(rng.below(uint64_t(vocab / 5)));  // few distinct ids: many repeats
  Tensor tid = from_vector(ids, {n}, DType::I64);
  Tensor out = empty_on({n, dim}, DType::F32, Device::CUDA);
  cuda::embedding_gather(dptr(dev(weight)), iptr(dev(tid)), dptr(out), n, vocab, dim);
  CHECK(bitwise_equal(out, embedding(weight, tid)));
  Tensor dweight = dev(zeros({vocab, dim}));
  cuda::embedding_scatter_add(dptr(dev(dout)), iptr(dev(tid)), dptr(dweight), n, vocab, dim);
  check_close(dweight, cpu_grad([&](const Tensor& w) { return embedding(w, tid); }, weight, dout), 1e-5, 1e-6,
              "embedding gradient");

  // ids out of range: zero rows from the gather, nothing from the scatter
  Tensor bad = from_vector({-1, double(vocab), 2}, {3}, DType::I64);
  Tensor out2 = dev_full({3, dim}, kNaN), dw2 = dev(zeros({vocab, dim}));
  cuda::embedding_gather(dptr(dev(weight)), iptr(dev(bad)), dptr(out2), 3, vocab, dim);
  cuda::embedding_scatter_add(dptr(dev(dout)), iptr(dev(bad)), dptr(dw2), 3, vocab, dim);
  Tensor want2 = zeros({3, dim}), want_dw2 = zeros({vocab, dim});
  for (int64_t j = 0; j < dim; ++j) {
    want2.set_at({2, j}, weight.at({2, j}));
    want_dw2.set_at({2, j}, dout.at({2, j}));
  }
  CHECK(bitwise_equal(out2, want2));
  CHECK(bitwise_equal(dw2, want_dw2));
}

TEST_CASE("cuda: sum_rows is the column sum, deterministic, and zero over no rows") {
  if (!have_device()) return;
  Rng rng(19);
  for (int64_t rows : {0, 1, 3, 37, 1000, 4097})
    for (int64_t cols : {1, 7, 33}) {
      Tensor x = randn({rows, cols}, rng), gx = dev(x);
      std::vector<double> want(static_cast<size_t>(cols), 0.0), scale(static_cast<size_t>(cols), 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          want[size_t(c)] += x.at({r, c});
          scale[size_t(c)] += std::fabs(x.at({r, c}));
        }
      Tensor out = dev_full({cols}, kNaN);
      cuda::sum_rows(dptr(gx), dptr(out), rows, cols);
      const std::vector<double> got = out.to_vector();
      for (int64_t c = 0; c < cols; ++c)  // f32 sums: 1e-6 of the sum of magnitudes
        CHECK(std::fabs(got[size_t(c)] - want[size_t(c)]) <= 1e-6 * scale[size_t(c)]);
      Tensor again = dev_full({cols}, kNaN);
      cuda::sum_rows(dptr(gx), dptr(again), rows, cols);
      CHECK(bitwise_equal(out, again));
    }
}

#endif  // ENG_CUDA
