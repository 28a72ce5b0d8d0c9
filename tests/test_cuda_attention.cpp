// The CUDA attention kernels (ops/cuda/attention.cu, ops/cuda/linear_attention.cu) against the CPU ops:
// flash attention forward and backward, causal linear attention forward and backward, and the recurrent step.
// Like tests/test_cuda.cpp, the cases exist only in CUDA=1 builds and return at once without a device (that
// file's first case says why). References are the CPU ops in f64.
#include <doctest/doctest.h>

#ifdef ENG_CUDA
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/rng.h"
#include "ops/attention_flash.h"
#include "ops/binary.h"
#include "ops/cuda/kernels.h"
#include "ops/linear_attention.h"
#include "ops/view.h"
#include "tests/cuda_test_util.h"

using namespace eng;
using namespace eng::cuda_test;

namespace {

// Within tol of the largest entry of `want` (at least 1: the inputs are O(1), so 1 is the natural size of an
// entry that cancels to near zero) plus tol relative.
void check_scaled(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  check_close(got, want, tol, tol * std::max(1.0, max_abs(want)), what);
}

bool all_finite(const Tensor& t) {
  for (double x : t.to_vector())
    if (!std::isfinite(x)) return false;
  return true;
}

struct FlashCase {
  int64_t B, H, Lq, Lk, D, Dv;
  bool causal;
  int64_t offset;
};

std::string describe(const FlashCase& c) {
  std::ostringstream os;
  os << "flash B=" << c.B << " H=" << c.H << " Lq=" << c.Lq << " Lk=" << c.Lk << " D=" << c.D << " Dv=" << c.Dv
     << " causal=" << c.causal << " offset=" << c.offset;
  return os.str();
}

// The GPU's forward and backward of one case, and the CPU op's in f64 on the same inputs.
struct FlashRun {
  Tensor out, lse, dq, dk, dv;             // device
  Tensor want, want_dq, want_dk, want_dv;  // CPU, f64
  std::function<void()> backward;          // runs the GPU backward again into dq, dk, dv
};

FlashRun run_flash(const FlashCase& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout) {
  const double scale = 1 / std::sqrt(double(c.D));
  FlashRun r;
  Tensor gq = dev(q), gk = dev(k), gv = dev(v), gdout = dev(dout);
  r.out = dev_full({c.B, c.H, c.Lq, c.Dv}, kNaN), r.lse = dev_full({c.B, c.H, c.Lq}, kNaN);
  cuda::flash_attention_forward(dptr(gq), dptr(gk), dptr(gv), dptr(r.out), dptr(r.lse), c.B, c.H, c.Lq, c.Lk, c.D,
                                c.Dv, float(scale), c.causal, c.offset);
  // NaN-filled: every gradient entry must be written
  r.dq = dev_full(q.shape(), kNaN), r.dk = dev_full(k.shape(), kNaN), r.dv = dev_full(v.shape(), kNaN);
  r.backward = [c, scale, gq, gk, gv, gdout, out = r.out, lse = r.lse, dq = r.dq, dk = r.dk, dv = r.dv] {
    cuda::flash_attention_backward(dptr(gq), dptr(gk), dptr(gv), dptr(out), dptr(lse), dptr(gdout), dptr(dq), dptr(dk),
                                   dptr(dv), c.B, c.H, c.Lq, c.Lk, c.D, c.Dv, float(scale), c.causal, c.offset);
  };
  r.backward();
  Tensor q64 = f64(q).set_requires_grad(), k64 = f64(k).set_requires_grad(), v64 = f64(v).set_requires_grad();
  AttentionMask mask;
  mask.causal = c.causal;
  mask.query_offset = c.offset;
  Tensor want = flash_attention(q64, k64, v64, mask, scale);
  want.backward(f64(dout));
  r.want = want.detach(), r.want_dq = q64.grad(), r.want_dk = k64.grad(), r.want_dv = v64.grad();
  return r;
}

// Each row's logsumexp over the keys it sees, by a double loop (-inf for a row that sees none).
Tensor lse_reference(const FlashCase& c, const Tensor& q, const Tensor& k) {
  const double scale = 1 / std::sqrt(double(c.D));
  const std::vector<double> qv = q.to_vector(), kv = k.to_vector();
  std::vector<double> out(static_cast<size_t>(c.B * c.H * c.Lq));
  for (int64_t bh = 0; bh < c.B * c.H; ++bh)
    for (int64_t i = 0; i < c.Lq; ++i) {
      const int64_t end = c.causal ? std::clamp<int64_t>(i + c.offset + 1, 0, c.Lk) : c.Lk;
      std::vector<double> s(static_cast<size_t>(end));
      double mx = -kInf, sum = 0;
      for (int64_t j = 0; j < end; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < c.D; ++d)
          dot += qv[size_t((bh * c.Lq + i) * c.D + d)] * kv[size_t((bh * c.Lk + j) * c.D + d)];
        s[size_t(j)] = dot * scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      for (double x : s) sum += std::exp(x - mx);
      out[size_t(bh * c.Lq + i)] = end == 0 ? -kInf : mx + std::log(sum);
    }
  return from_vector(out, {c.B, c.H, c.Lq}, DType::F64);
}

struct LinearCase {
  int64_t B, H, N, M, Dv;
};

LinearAttentionArgs linear_args(bool elu, double eps) {
  LinearAttentionArgs a;
  a.feature = elu ? LinearFeature::EluPlusOne : LinearFeature::Identity;
  a.eps = eps;
  return a;
}

}  // namespace

TEST_CASE("cuda: flash attention forward and backward match the CPU op") {
  if (!have_device()) return;
  // Sizes off the 64-row tiles, the head dims of each register tile (32, 64, 128), causal on and off, and
  // query offsets: a KV-cache shape (Lq < Lk, offset Lk - Lq), a partial one, one where a key block's first
  // query is the last of a query block (offset 1), and a negative one under which the first queries see no
  // key (zeros, lse -inf, no gradient).
  const std::vector<FlashCase> cases = {
      {1, 3, 1, 1, 16, 24, false, 0},     {3, 1, 37, 37, 16, 24, true, 0},     {1, 3, 200, 200, 64, 64, true, 0},
      {3, 1, 200, 200, 64, 24, false, 0}, {1, 3, 37, 200, 64, 64, true, 163},  {3, 1, 5, 70, 16, 64, true, 40},
      {1, 3, 37, 37, 16, 24, true, -5},   {1, 3, 130, 131, 128, 128, true, 1}, {3, 1, 200, 37, 16, 24, false, 0}};
  Rng rng(20);
  for (const FlashCase& c : cases) {
    Tensor q = randn({c.B, c.H, c.Lq, c.D}, rng), k = randn({c.B, c.H, c.Lk, c.D}, rng);
    Tensor v = randn({c.B, c.H, c.Lk, c.Dv}, rng), dout = randn({c.B, c.H, c.Lq, c.Dv}, rng);
    FlashRun r = run_flash(c, q, k, v, dout);
    const std::string what = describe(c);
    // f32 logits carry ~sqrt(D) 2^-24 relative error, which exp passes on to the weights, and the sums over
    // up to 200 keys (and query rows) add about as much: a few 1e-6 of the largest entry. 1e-4 leaves room
    // for the gradients' cancellation in dS = P (dP - delta).
    check_scaled(r.out, r.want, 1e-4, what + " out");
    check_close(r.lse, lse_reference(c, q, k), 1e-5, 1e-5, what + " lse");
    check_scaled(r.dq, r.want_dq, 1e-4, what + " dq");
    check_scaled(r.dk, r.want_dk, 1e-4, what + " dk");
    check_scaled(r.dv, r.want_dv, 1e-4, what + " dv");
    // deterministic: a second backward gives the same bits
    const Tensor dq1 = host(r.dq), dk1 = host(r.dk), dv1 = host(r.dv);
    r.backward();
    CHECK(bitwise_equal(r.dq, dq1));
    CHECK(bitwise_equal(r.dk, dk1));
    CHECK(bitwise_equal(r.dv, dv1));
  }
  CHECK_THROWS_WITH_AS(cuda::flash_attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 4, 4, 129, 64,
                                                     1.f, false, 0),
                       doctest::Contains("at most 128"), Error);
  CHECK_THROWS_WITH_AS(cuda::flash_attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                      nullptr, nullptr, 1, 1, 4, 4, 64, 129, 1.f, false, 0),
                       doctest::Contains("at most 128"), Error);
}

TEST_CASE("cuda: flash attention stays finite on large logits") {
  if (!have_device()) return;
  Rng rng(21);
  for (bool causal : {false, true}) {
    const FlashCase c{1, 3, 100, 100, 64, 64, causal, 0};
    // logits of size ~1e3: exp without the running max would overflow
    Tensor q = randn({1, 3, 100, 64}, rng) * 30.0, k = randn({1, 3, 100, 64}, rng) * 30.0;
    Tensor v = randn({1, 3, 100, 64}, rng), dout = randn({1, 3, 100, 64}, rng);
    FlashRun r = run_flash(c, q, k, v, dout);
    const std::string what = describe(c) + " large";
    CHECK(all_finite(r.out));
    CHECK(all_finite(r.lse));
    CHECK(all_finite(r.dq));
    CHECK(all_finite(r.dk));
    CHECK(all_finite(r.dv));
    // f32 logits of ~1e3 are off by ~1e3 sqrt(D) 2^-24 ~ 5e-4, and the weights by as much relative
    check_scaled(r.out, r.want, 1e-2, what + " out");
  }
}

TEST_CASE("cuda: causal linear attention forward and backward match the CPU op") {
  if (!have_device()) return;
  // N off the 32-position chunks, Dv off (and over) the 32-column slices, M and Dv at their limit of 128
  const std::vector<LinearCase> cases = {{1, 3, 1, 16, 24},   {3, 1, 37, 16, 24},  {1, 3, 200, 64, 64},
                                         {3, 1, 200, 64, 24}, {1, 3, 70, 128, 128}, {3, 1, 33, 16, 100}};
  const float eps = 1e-6f;
  Rng rng(22);
  for (const LinearCase& c : cases)
    for (bool elu : {true, false}) {
      const Shape qs{c.B, c.H, c.N, c.M}, vs{c.B, c.H, c.N, c.Dv};
      // identity features are used as given: keep them positive, so that the denominators are
      Tensor q = elu ? randn(qs, rng) : rand(qs, rng, DType::F32, 0.05, 1);
      Tensor k = elu ? randn(qs, rng) : rand(qs, rng, DType::F32, 0.05, 1);
      Tensor v = randn(vs, rng), dout = randn(vs, rng);
      Tensor gq = dev(q), gk = dev(k), gv = dev(v), gdout = dev(dout), out = dev_full(vs, kNaN);
      cuda::causal_linear_attention_forward(dptr(gq), dptr(gk), dptr(gv), dptr(out), c.B, c.H, c.N, c.M, c.Dv, eps,
                                            elu);
      Tensor dq = dev_full(qs, kNaN), dk = dev_full(qs, kNaN), dv = dev_full(vs, kNaN);
      auto backward = [&] {
        cuda::causal_linear_attention_backward(dptr(gq), dptr(gk), dptr(gv), dptr(out), dptr(gdout), dptr(dq),
                                               dptr(dk), dptr(dv), c.B, c.H, c.N, c.M, c.Dv, eps, elu);
      };
      backward();
      Tensor q64 = f64(q).set_requires_grad(), k64 = f64(k).set_requires_grad(), v64 = f64(v).set_requires_grad();
      Tensor want = causal_linear_attention(q64, k64, v64, linear_args(elu, eps));
      want.backward(f64(dout));
      std::ostringstream what;
      what << "linear B=" << c.B << " H=" << c.H << " N=" << c.N << " M=" << c.M << " Dv=" << c.Dv << " elu=" << elu;
      // The denominators sum N positive terms (relative error ~N 2^-24 ~ 1e-5 at N = 200); numerators and
      // gradients sum terms of either sign, whose error is relative to their magnitudes, i.e. to the largest
      // entry: 1e-4 of it.
      check_scaled(out, want.detach(), 1e-4, what.str() + " out");
      check_scaled(dq, q64.grad(), 1e-4, what.str() + " dq");
      check_scaled(dk, k64.grad(), 1e-4, what.str() + " dk");
      check_scaled(dv, v64.grad(), 1e-4, what.str() + " dv");
      const Tensor dq1 = host(dq), dk1 = host(dk), dv1 = host(dv);
      backward();
      CHECK(bitwise_equal(dq, dq1));
      CHECK(bitwise_equal(dk, dk1));
      CHECK(bitwise_equal(dv, dv1));
    }
  CHECK_THROWS_WITH_AS(
      cuda::causal_linear_attention_forward(nullptr, nullptr, nullptr, nullptr, 1, 1, 4, 129, 8, eps, true),
      doctest::Contains("at most 128"), Error);
  CHECK_THROWS_WITH_AS(cuda::causal_linear_attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                              nullptr, nullptr, 1, 1, 4, 8, 129, eps, true),
                       doctest::Contains("at most 128"), Error);
}

TEST_CASE("cuda: the linear attention step, run N times, is the causal forward at every position") {
  if (!have_device()) return;
  const int64_t B = 1, H = 3, N = 37, M = 16, Dv = 24;
  const float eps = 1e-6f;
  Rng rng(23);
  for (bool elu : {true, false}) {
    const Shape qs{B, H, N, M}, vs{B, H, N, Dv};
    Tensor q = elu ? randn(qs, rng) : rand(qs, rng, DType::F32, 0.05, 1);
    Tensor k = elu ? randn(qs, rng) : rand(qs, rng, DType::F32, 0.05, 1);
    Tensor v = randn(vs, rng), full_out = dev_full(vs, kNaN);
    cuda::causal_linear_attention_forward(dptr(dev(q)), dptr(dev(k)), dptr(dev(v)), dptr(full_out), B, H, N, M, Dv,
                                          eps, elu);
    const Tensor want_full = host(full_out);
    Tensor s = dev(zeros({B, H, M, Dv})), z = dev(zeros({B, H, M}));
    Tensor s64 = zeros({B, H, M, Dv}, DType::F64), z64 = zeros({B, H, M}, DType::F64);
    const LinearAttentionArgs args = linear_args(elu, eps);
    for (int64_t n = 0; n < N; ++n) {
      Tensor qn = narrow(q, 2, n, 1).contiguous(), kn = narrow(k, 2, n, 1).contiguous();
      Tensor vn = narrow(v, 2, n, 1).contiguous(), out = dev_full({B, H, 1, Dv}, kNaN);
      cuda::linear_attention_step(dptr(dev(qn)), dptr(dev(kn)), dptr(dev(vn)), dptr(s), dptr(z), dptr(out), B, H, M,
                                  Dv, eps, elu);
      const std::string what = "step " + std::to_string(n) + (elu ? " elu" : " identity");
      // sums in another order than the chunked forward's: 1e-4 as there
      check_scaled(out, narrow(want_full, 2, n, 1).contiguous(), 1e-4, what + " against the forward");
      check_scaled(out, linear_attention_step(f64(qn), f64(kn), f64(vn), s64, z64, args), 1e-4,
                   what + " against the CPU step");
    }
    check_scaled(s, s64, 1e-5, "state s");
    check_scaled(z, z64, 1e-5, "state z");
    // Without k the state is only read.
    const Tensor s_before = host(s), z_before = host(z);
    Tensor q0 = narrow(q, 2, 0, 1).contiguous(), out = dev_full({B, H, 1, Dv}, kNaN);
    cuda::linear_attention_step(dptr(dev(q0)), nullptr, nullptr, dptr(s), dptr(z), dptr(out), B, H, M, Dv, eps, elu);
    check_scaled(out, linear_attention_step(f64(q0), Tensor(), Tensor(), s64, z64, args), 1e-4, "read-only step");
    CHECK(bitwise_equal(s, s_before));
    CHECK(bitwise_equal(z, z_before));
  }
}

TEST_CASE("cuda: causal linear attention stays finite on large inputs") {
  if (!have_device()) return;
  const int64_t B = 1, H = 3, N = 200, M = 64, Dv = 64;
  const float eps = 1e-6f;
  Rng rng(24);
  const Shape qs{B, H, N, M}, vs{B, H, N, Dv};
  // elu + 1 features up to ~150 and down to exp(-150) = 0 in f32; states summing 200 of them
  Tensor q = randn(qs, rng) * 50.0, k = randn(qs, rng) * 50.0, v = randn(vs, rng) * 50.0, dout = randn(vs, rng);
  Tensor gq = dev(q), gk = dev(k), gv = dev(v), out = dev_full(vs, kNaN);
  cuda::causal_linear_attention_forward(dptr(gq), dptr(gk), dptr(gv), dptr(out), B, H, N, M, Dv, eps, true);
  Tensor dq = dev_full(qs, kNaN), dk = dev_full(qs, kNaN), dv = dev_full(vs, kNaN);
  cuda::causal_linear_attention_backward(dptr(gq), dptr(gk), dptr(gv), dptr(out), dptr(dev(dout)), dptr(dq), dptr(dk),
                                         dptr(dv), B, H, N, M, Dv, eps, true);
  CHECK(all_finite(out));
  CHECK(all_finite(dq));
  CHECK(all_finite(dk));
  CHECK(all_finite(dv));
  check_scaled(out, causal_linear_attention(f64(q), f64(k), f64(v), linear_args(true, eps)), 1e-4, "large out");
}

#endif  // ENG_CUDA
