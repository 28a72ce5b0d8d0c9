// Every SIMD table of engine/vec_kernels.h (AVX2 and AVX-512 where the CPU has them, NEON on ARM) against
// the scalar reference, kernel by kernel, on sizes with every tail length and on special values. The
// tolerance of each kernel is stated where it is checked.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/vec_kernels.h"
#include <doctest/doctest.h>

using namespace eng;

namespace {

// The SIMD tables this machine runs (none on a CPU without AVX2 or NEON: the test then checks nothing).
std::vector<const VecKernels*> simd_tables() {
  std::vector<const VecKernels*> out;
  for (SimdLevel l : {SimdLevel::Neon, SimdLevel::Avx2, SimdLevel::Avx512}) {
    const VecKernels& k = vec_kernels_for(l);
    if (std::string(k.name) == "scalar") continue;
    bool seen = false;
    for (const VecKernels* o : out) seen |= o == &k;
    if (!seen) out.push_back(&k);
  }
  return out;
}

const VecKernels& ref() { return vec_kernels_for(SimdLevel::Scalar); }

const std::vector<int64_t> kSizes = {1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257};

std::vector<float> randn(int64_t n, float scale, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

// |got - want| <= atol + rtol |want| element by element, NaN matching NaN and infinities matching exactly;
// returns the worst excess ratio (<= 1 passes) for the message.
double worst_ratio(const std::vector<float>& got, const std::vector<float>& want, double rtol, double atol) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      if (!(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i])) return 1e30;
      continue;
    }
    const double err = std::fabs(double(got[i]) - double(want[i]));
    worst = std::max(worst, err / (atol + rtol * std::fabs(double(want[i]))));
  }
  return worst;
}

using Unary = void (*)(const float*, float*, int64_t);

// A dense sweep of [lo, hi] plus the special values, through both tables.
void check_unary(const char* what, Unary VecKernels::*fn, float lo, float hi, double rtol, double atol,
                 bool specials = true) {
  std::vector<float> x;
  for (int64_t i = 0; i <= 20011; ++i) x.push_back(lo + (hi - lo) * float(i) / 20011.f);
  if (specials)
    for (float s : {0.f, -0.f, 1e-30f, -1e-30f, std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
      x.push_back(s);
  std::vector<float> want(x.size()), got(x.size());
  (ref().*fn)(x.data(), want.data(), int64_t(x.size()));
  for (const VecKernels* k : simd_tables()) {
    (k->*fn)(x.data(), got.data(), int64_t(x.size()));
    const double r = worst_ratio(got, want, rtol, atol);
    INFO(std::string(what), " on ", std::string(k->name), ": worst error / tolerance = ", r);
    CHECK(r <= 1);
  }
}

}  // namespace

TEST_CASE("vec kernels: the table in use matches the CPU level, capped by ENG_CPU") {
  INFO("SIMD tables on this machine: ", simd_tables().size(), ", in use: ", std::string(vec_kernels().name));
  CHECK(std::string(vec_kernels().name) == std::string(vec_kernels_for(simd_level()).name));
  CHECK(std::string(ref().name) == "scalar");
}

TEST_CASE("vec kernels: transcendental maps within their stated error of the scalar reference") {
  const double ulp = 5.96e-8;  // 2^-24
  check_unary("exp", &VecKernels::exp, -87.f, 88.f, 4 * ulp, 0);
  check_unary("exp (underflow to 0, no denormals)", &VecKernels::exp, -104.f, -87.f, 4 * ulp, 1.3e-38);
  check_unary("log", &VecKernels::log, 1e-37f, 1e3f, 3 * ulp, 0);
  check_unary("log near 1", &VecKernels::log, 0.5f, 2.f, 3 * ulp, 0, false);
  check_unary("tanh", &VecKernels::tanh, -12.f, 12.f, 5 * ulp, 0);
  check_unary("tanh near 0", &VecKernels::tanh, -1e-3f, 1e-3f, 5 * ulp, 0, false);
  check_unary("sigmoid", &VecKernels::sigmoid, -80.f, 80.f, 4 * ulp, 0);
  check_unary("elu_plus_one", &VecKernels::elu_plus_one, -80.f, 80.f, 4 * ulp, 0);
  check_unary("silu", &VecKernels::silu, -80.f, 80.f, 4 * ulp, 0);
  check_unary("gelu_tanh", &VecKernels::gelu_tanh, 0.f, 12.f, 6 * ulp, 1e-30);
  // below 0 it is about x e^{2u}, |2u| up to 150: u's own f32 rounding is amplified by |2u|
  check_unary("gelu_tanh, x < 0", &VecKernels::gelu_tanh, -12.f, 0.f, 2e-5, 1e-30, false);
  // erf by a rational form: up to 2.4e-7 absolute in f32 (near |z| = 4), so x * 1.2e-7 on gelu
  check_unary("gelu_erf", &VecKernels::gelu_erf, -12.f, 12.f, 4 * ulp, 8e-7);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const VecKernels* k : simd_tables()) {
    float x[3] = {nan, -1.f, 0.5f}, y[3];
    k->elu(x, y, 3, 1.f);
    CHECK(std::isnan(y[0]));
    CHECK(y[2] == 0.5f);
  }
}

TEST_CASE("vec kernels: elu and the activation backwards against the reference, every tail") {
  for (const VecKernels* k : simd_tables())
    for (int64_t n : kSizes) {
      INFO(std::string(k->name), " n = ", n);
      const std::vector<float> x = randn(n, 3.f, uint32_t(n)), g = randn(n, 1.f, uint32_t(n + 7));
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      ref().elu(x.data(), want.data(), n, 0.7f);
      k->elu(x.data(), got.data(), n, 0.7f);
      CHECK(worst_ratio(got, want, 4e-7, 1e-30) <= 1);
      ref().elu_backward(g.data(), x.data(), want.data(), n, 0.7f);
      k->elu_backward(g.data(), x.data(), got.data(), n, 0.7f);
      CHECK(worst_ratio(got, want, 4e-7, 1e-30) <= 1);
      ref().gelu_tanh_backward(g.data(), x.data(), want.data(), n);
      k->gelu_tanh_backward(g.data(), x.data(), got.data(), n);
      CHECK(worst_ratio(got, want, 2e-6, 1e-7) <= 1);
      ref().gelu_erf_backward(g.data(), x.data(), want.data(), n);
      k->gelu_erf_backward(g.data(), x.data(), got.data(), n);
      CHECK(worst_ratio(got, want, 1e-6, 1e-6) <= 1);
      ref().silu_backward(g.data(), x.data(), want.data(), n);
      k->silu_backward(g.data(), x.data(), got.data(), n);
      CHECK(worst_ratio(got, want, 1e-6, 1e-7) <= 1);
    }
}

TEST_CASE("vec kernels: binary ops are exact, reductions within rounding of the reference") {
  using Binary = void (*)(const float*, const float*, float*, int64_t);
  for (const VecKernels* k : simd_tables())
    for (int64_t n : kSizes) {
      INFO(std::string(k->name), " n = ", n);
      const std::vector<float> a = randn(n, 2.f, uint32_t(n)), b = randn(n, 2.f, uint32_t(3 * n + 1));
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      for (Binary VecKernels::*fn : {&VecKernels::add, &VecKernels::sub, &VecKernels::mul, &VecKernels::div}) {
        (ref().*fn)(a.data(), b.data(), want.data(), n);
        (k->*fn)(a.data(), b.data(), got.data(), n);
        CHECK(got == want);
      }
      double abs_sum = 0;
      for (float v : a) abs_sum += std::fabs(v);
      CHECK(std::fabs(k->sum(a.data(), n) - ref().sum(a.data(), n)) <= 1e-6 * abs_sum + 1e-30);
      CHECK(std::fabs(k->dot(a.data(), b.data(), n) - ref().dot(a.data(), b.data(), n)) <= 1e-5 * abs_sum);
      CHECK(k->max(a.data(), n) == ref().max(a.data(), n));
      const float m = ref().max(a.data(), n);
      const float sw = ref().exp_sub_sum(a.data(), m, want.data(), n), sg = k->exp_sub_sum(a.data(), m, got.data(), n);
      CHECK(worst_ratio(got, want, 4 * 5.96e-8, 0) <= 1);
      CHECK(std::fabs(sg - sw) <= 1e-6 * sw);
    }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const VecKernels* k : simd_tables()) {
    std::vector<float> v(19, 1.f);
    v[17] = nan;
    CHECK(std::isnan(k->max(v.data(), 19)));
    CHECK(k->max(v.data(), 0) == -std::numeric_limits<float>::infinity());
  }
}

TEST_CASE("vec kernels: softmax and log-softmax rows, forward and backward, special rows") {
  for (const VecKernels* k : simd_tables())
    for (int64_t n : kSizes) {
      INFO(std::string(k->name), " n = ", n);
      const std::vector<float> x = randn(n, 4.f, uint32_t(n + 11)), g = randn(n, 1.f, uint32_t(n + 13));
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n)), dwant(static_cast<size_t>(n)), dgot(static_cast<size_t>(n));
      ref().softmax_row(x.data(), want.data(), n);
      k->softmax_row(x.data(), got.data(), n);
      CHECK(worst_ratio(got, want, 1e-6, 1e-9) <= 1);
      ref().softmax_backward_row(want.data(), g.data(), dwant.data(), n);
      k->softmax_backward_row(want.data(), g.data(), dgot.data(), n);
      CHECK(worst_ratio(dgot, dwant, 1e-5, 1e-7) <= 1);
      ref().log_softmax_row(x.data(), want.data(), n);
      k->log_softmax_row(x.data(), got.data(), n);
      CHECK(worst_ratio(got, want, 1e-6, 1e-6) <= 1);
      ref().log_softmax_backward_row(want.data(), g.data(), dwant.data(), n);
      k->log_softmax_backward_row(want.data(), g.data(), dgot.data(), n);
      CHECK(worst_ratio(dgot, dwant, 1e-5, 1e-6) <= 1);
    }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const VecKernels* k : simd_tables()) {
    std::vector<float> x(11, -inf), y(11);
    k->softmax_row(x.data(), y.data(), 11);
    CHECK(y == std::vector<float>(11, 0.f));
    k->log_softmax_row(x.data(), y.data(), 11);
    CHECK(y == std::vector<float>(11, -inf));
    x[3] = 2.f;  // one finite entry takes all the mass; -inf entries get exactly 0
    k->softmax_row(x.data(), y.data(), 11);
    CHECK(y[3] == 1.f);
    CHECK(y[10] == 0.f);
    x[9] = nan;
    k->softmax_row(x.data(), y.data(), 11);
    for (float v : y) CHECK(std::isnan(v));
    x[3] = -inf;  // NaN among -inf: the maximum skips the NaN on x86, the row is still NaN
    for (bool log : {false, true}) {
      (log ? k->log_softmax_row : k->softmax_row)(x.data(), y.data(), 11);
      for (float v : y) CHECK(std::isnan(v));
    }
    std::vector<float> nans(19, nan);
    k->softmax_row(nans.data(), nans.data(), 19);
    for (float v : nans) CHECK(std::isnan(v));
  }
}

TEST_CASE("vec kernels: layer-norm and rms-norm rows, forward, backward and parameter gradients") {
  for (const VecKernels* k : simd_tables())
    for (int64_t c : kSizes)
      for (bool center : {true, false}) {
        INFO(std::string(k->name), " c = ", c, center ? " layer-norm" : " rms-norm");
        const std::vector<float> x = randn(c, 2.f, uint32_t(c)), w = randn(c, 1.f, uint32_t(c + 1)),
                                 b = randn(c, 1.f, uint32_t(c + 2)), g = randn(c, 1.f, uint32_t(c + 3));
        std::vector<float> want(static_cast<size_t>(c)), got(static_cast<size_t>(c));
        float mu_w = 0, mu_g = 0, rs_w = 0, rs_g = 0;
        ref().norm_row(x.data(), w.data(), center ? b.data() : nullptr, want.data(), c, 1e-5f,
                       center ? &mu_w : nullptr, &rs_w);
        k->norm_row(x.data(), w.data(), center ? b.data() : nullptr, got.data(), c, 1e-5f, center ? &mu_g : nullptr,
                    &rs_g);
        CHECK(worst_ratio(got, want, 1e-5, 1e-6) <= 1);
        CHECK(std::fabs(rs_g - rs_w) <= 1e-5 * rs_w);
        CHECK(std::fabs(mu_g - mu_w) <= 1e-6 * 2);
        const float* mean = center ? &mu_w : nullptr;
        ref().norm_backward_row(x.data(), w.data(), mean, rs_w, g.data(), want.data(), nullptr, nullptr, c);
        k->norm_backward_row(x.data(), w.data(), mean, rs_w, g.data(), got.data(), nullptr, nullptr, c);
        CHECK(worst_ratio(got, want, 1e-5, 1e-5) <= 1);
        // With the parameter gradients (added into what is there; db may be null): dx is the same bits.
        std::vector<float> dw_w(static_cast<size_t>(c), 0.5f), db_w(static_cast<size_t>(c), -0.5f), dw_g = dw_w, db_g = db_w;
        std::vector<float> dx_w(static_cast<size_t>(c)), dx_g(static_cast<size_t>(c)), dw_alone = dw_g;
        ref().norm_backward_row(x.data(), w.data(), mean, rs_w, g.data(), dx_w.data(), dw_w.data(), db_w.data(), c);
        k->norm_backward_row(x.data(), w.data(), mean, rs_w, g.data(), dx_g.data(), dw_g.data(), db_g.data(), c);
        CHECK(dx_w == want);
        CHECK(dx_g == got);
        CHECK(worst_ratio(dw_g, dw_w, 1e-6, 1e-7) <= 1);
        CHECK(db_g == db_w);
        k->norm_backward_row(x.data(), w.data(), mean, rs_w, g.data(), dx_g.data(), dw_alone.data(), nullptr, c);
        CHECK(dw_alone == dw_g);
      }
}

TEST_CASE("vec kernels: cross-entropy rows with label smoothing, loss and gradient") {
  for (const VecKernels* k : simd_tables())
    for (int64_t c : kSizes)
      for (float eps : {0.f, 0.1f}) {
        INFO(std::string(k->name), " c = ", c, " smoothing ", eps);
        const std::vector<float> x = randn(c, 3.f, uint32_t(c + 5));
        const int64_t t = c / 2;
        float lse_w = 0, lse_g = 0;
        const float on = 1 - eps, uni = eps / float(c);
        const float lw = ref().cross_entropy_row(x.data(), c, t, on, uni, &lse_w);
        const float lg = k->cross_entropy_row(x.data(), c, t, on, uni, &lse_g);
        CHECK(std::fabs(lse_g - lse_w) <= 1e-6 * (1 + std::fabs(lse_w)));
        CHECK(std::fabs(lg - lw) <= 2e-6 * (1 + std::fabs(lw)));
        std::vector<float> want(static_cast<size_t>(c)), got(static_cast<size_t>(c));
        ref().cross_entropy_backward_row(x.data(), c, t, lse_w, on, uni, 0.25f, want.data());
        k->cross_entropy_backward_row(x.data(), c, t, lse_w, on, uni, 0.25f, got.data());
        CHECK(worst_ratio(got, want, 1e-6, 1e-8) <= 1);
      }
}

TEST_CASE("vec kernels: the fused cross-entropy row (max, sum and gradient at once) against the reference") {
  for (const VecKernels* k : simd_tables())
    for (int64_t c : kSizes)
      for (float eps : {0.f, 0.1f}) {
        INFO(std::string(k->name), " c = ", c, " smoothing ", eps);
        const std::vector<float> x = randn(c, 3.f, uint32_t(c + 11));
        const int64_t t = c / 3;
        const double scale = 0.25;
        const float b = float(eps / double(c) * scale), on_scale = float((1 - eps) * scale);
        std::vector<float> want(static_cast<size_t>(c)), got(static_cast<size_t>(c));
        float mw = 0, mg = 0;
        const float sw = ref().cross_entropy_grad_row(x.data(), c, t, scale, b, on_scale, want.data(), &mw);
        const float sg = k->cross_entropy_grad_row(x.data(), c, t, scale, b, on_scale, got.data(), &mg);
        CHECK(mg == mw);
        CHECK(std::fabs(sg - sw) <= 1e-6 * sw);
        // exp within 4 ulp, then one product and difference in float: 1e-6 of the largest term e a <= scale
        CHECK(worst_ratio(got, want, 1e-6, 1e-6 * scale) <= 1);
      }
  // NaN anywhere: a NaN max, and the whole gradient row NaN
  std::vector<const VecKernels*> all = simd_tables();
  all.push_back(&ref());
  for (const VecKernels* k : all) {
    std::vector<float> x = randn(37, 1.f, 3), gx(37);
    x[20] = std::numeric_limits<float>::quiet_NaN();
    float mx = 0;
    k->cross_entropy_grad_row(x.data(), 37, 2, 1.0, 0.f, 1.f, gx.data(), &mx);
    CHECK(std::isnan(mx));
    for (float v : gx) CHECK(std::isnan(v));
  }
}

TEST_CASE("vec kernels: the Adam-family update in every form, every tail") {
  for (const VecKernels* k : simd_tables())
    for (int64_t n : kSizes)
      for (int form = 0; form < 3; ++form) {
        INFO(std::string(k->name), " n = ", n, " form ", form);
        // 0: Adam with L2, 1: AdamW (decay), 2: RAdam's unrectified (plain momentum) step
        AdamStep s{form == 1 ? 0.999f : 1.f, form == 0 ? 0.01f : 0.f, 0.9f, 0.999f, 1e-3f, 1.3f, 1e-8f, form != 2};
        std::vector<float> p = randn(n, 1.f, uint32_t(n)), g = randn(n, 1.f, uint32_t(n + 1)),
                           m = randn(n, 0.1f, uint32_t(n + 2)), v = randn(n, 0.1f, uint32_t(n + 3));
        for (float& e : v) e = e * e;
        std::vector<float> p2 = p, m2 = m, v2 = v;
        ref().adam(p.data(), g.data(), m.data(), v.data(), n, s);
        k->adam(p2.data(), g.data(), m2.data(), v2.data(), n, s);
        CHECK(worst_ratio(m2, m, 1e-6, 1e-9) <= 1);
        CHECK(worst_ratio(v2, v, 1e-6, 1e-12) <= 1);
        CHECK(worst_ratio(p2, p, 1e-6, 1e-7) <= 1);
      }
}

TEST_CASE("vec kernels: every table fills every field, and the reference's maps are the functions they name") {
  // The tables are filled field by field, by name (engine/vec_kernels_scalar.cpp, engine/vec_kernels_simd.h); a
  // field left out stays null. VecKernels holds pointers only (the name and the kernels), so it reads as words.
  static_assert(sizeof(VecKernels) % sizeof(void*) == 0, "VecKernels is expected to hold pointers only");
  std::vector<const VecKernels*> tables = simd_tables();
  tables.push_back(&ref());
  for (const VecKernels* t : tables) {
    void* words[sizeof(VecKernels) / sizeof(void*)];
    std::memcpy(words, t, sizeof words);
    for (size_t i = 0; i < sizeof words / sizeof words[0]; ++i) {
      INFO("table ", t->name, ", field ", i);
      CHECK(words[i] != nullptr);
    }
  }
  // The maps of one signature, each at a point where they all differ, against <cmath>: the SIMD tables are checked
  // against these, so a swap in the reference would pass unseen there.
  const float x = 0.75f;
  auto map = [&](void (*f)(const float*, float*, int64_t)) {
    float y = 0;
    f(&x, &y, 1);
    return double(y);
  };
  CHECK(map(ref().exp) == doctest::Approx(std::exp(0.75)));
  CHECK(map(ref().log) == doctest::Approx(std::log(0.75)));
  CHECK(map(ref().tanh) == doctest::Approx(std::tanh(0.75)));
  CHECK(map(ref().sigmoid) == doctest::Approx(1 / (1 + std::exp(-0.75))));
  CHECK(map(ref().silu) == doctest::Approx(0.75 / (1 + std::exp(-0.75))));
  CHECK(map(ref().gelu_erf) == doctest::Approx(0.75 * 0.5 * (1 + std::erf(0.75 / std::sqrt(2.0)))));
  CHECK(map(ref().gelu_tanh) ==
        doctest::Approx(0.5 * 0.75 * (1 + std::tanh(std::sqrt(2 / std::acos(-1.0)) * (0.75 + 0.044715 * 0.75 * 0.75 * 0.75)))));
  CHECK(map(ref().elu_plus_one) == doctest::Approx(1.75));
  const float a = 3, b = 2;
  auto binary = [&](void (*f)(const float*, const float*, float*, int64_t)) {
    float y = 0;
    f(&a, &b, &y, 1);
    return double(y);
  };
  CHECK(binary(ref().add) == 5);
  CHECK(binary(ref().sub) == 1);
  CHECK(binary(ref().mul) == 6);
  CHECK(binary(ref().div) == 1.5);
  const float v[3] = {1, 4, 2};
  CHECK(ref().sum(v, 3) == 7);
  CHECK(ref().max(v, 3) == 4);
  CHECK(ref().dot(v, v, 3) == 21);
  const float zeros2[2] = {0, 0};
  float row[2];
  ref().softmax_row(zeros2, row, 2);
  CHECK(row[0] == 0.5f);
  ref().log_softmax_row(zeros2, row, 2);
  CHECK(row[0] == doctest::Approx(std::log(0.5)));
}
