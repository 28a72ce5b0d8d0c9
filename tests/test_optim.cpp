#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "engine/optim.h"
#include "engine/rng.h"
#include "engine/schedule.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;

namespace {

Tensor param(const std::vector<double>& v, DType dtype = DType::F64) {
  Tensor t = from_vector(v, {int64_t(v.size())}, dtype);
  t.set_requires_grad();
  return t;
}

void give_grad(Tensor p, const std::vector<double>& g) { p.set_grad(from_vector(g, p.shape(), p.dtype())); }

// Hand-computed values are compared to 12 significant digits: the optimizer rounds in another order.
void check_values(const Tensor& t, const std::vector<double>& want) {
  std::vector<double> got = t.to_vector();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
}

}  // namespace

TEST_CASE("optim: SGD plain and with weight decay") {
  Tensor p = param({1, -2, 3});
  SGD opt({{"w", p}}, 0.1);
  give_grad(p, {0.5, 1, -2});
  opt.step();
  // p -= 0.1 g: [1 - 0.05, -2 - 0.1, 3 + 0.2]
  check_values(p, {0.95, -2.1, 3.2});
  CHECK(opt.steps() == 1);
  CHECK(opt.state().empty());  // no momentum, no state

  Tensor q = param({1, -2, 3});
  SGD wd({{"w", q}}, 0.1, 0, 0.1);
  give_grad(q, {0.5, 1, -2});
  wd.step();
  // g + 0.1 p = [0.6, 0.8, -1.7]; p -= 0.1 (g + 0.1 p): [1 - 0.06, -2 - 0.08, 3 + 0.17]
  check_values(q, {0.94, -2.08, 3.17});
}

TEST_CASE("optim: SGD momentum and nesterov") {
  const std::vector<std::vector<double>> grads = {{0.5, 1}, {-1, 2}, {0.2, 0.4}};
  Tensor p = param({1, -2});
  SGD opt({{"w", p}}, 0.1, 0.9);
  give_grad(p, grads[0]);
  opt.step();
  // b = g1 = [0.5, 1]; p = [1 - 0.05, -2 - 0.1]
  check_values(p, {0.95, -2.1});
  give_grad(p, grads[1]);
  opt.step();
  // b = 0.9 [0.5, 1] + [-1, 2] = [-0.55, 2.9]; p = [0.95 + 0.055, -2.1 - 0.29]
  check_values(p, {1.005, -2.39});
  give_grad(p, grads[2]);
  opt.step();
  // b = 0.9 [-0.55, 2.9] + [0.2, 0.4] = [-0.295, 3.01]; p = [1.005 + 0.0295, -2.39 - 0.301]
  check_values(p, {1.0345, -2.691});
  check_values(opt.state()[0].second, {-0.295, 3.01});
  CHECK(opt.state()[0].first == "optim.momentum_buffer.w");

  Tensor q = param({1, -2});
  SGD nesterov({{"w", q}}, 0.1, 0.9, 0, true);
  give_grad(q, grads[0]);
  nesterov.step();
  // b = [0.5, 1]; d = g + 0.9 b = [0.95, 1.9]; p = [1 - 0.095, -2 - 0.19]
  check_values(q, {0.905, -2.19});
  give_grad(q, grads[1]);
  nesterov.step();
  // b = [-0.55, 2.9]; d = [-1 - 0.495, 2 + 2.61] = [-1.495, 4.61]; p = [0.905 + 0.1495, -2.19 - 0.461]
  check_values(q, {1.0545, -2.651});
}

TEST_CASE("optim: Adam matches the hand-computed update") {
  // lr 0.1, betas (0.9, 0.999), eps 0.1: a large eps, so that where it is added shows in the result.
  Tensor p = param({1, -2, 0.5});
  Adam opt({{"w", p}}, 0.1, 0.9, 0.999, 0.1);
  give_grad(p, {0.5, -1, 2});
  opt.step();
  // t = 1: m = 0.1 g, v = 0.001 g^2, so m_hat = g and sqrt(v_hat) = |g| = [0.5, 1, 2]
  // p -= 0.1 m_hat / (sqrt(v_hat) + 0.1) = 0.1 [0.5 / 0.6, -1 / 1.1, 2 / 2.1]
  check_values(p, {1 - 0.05 / 0.6, -2 + 0.1 / 1.1, 0.5 - 0.2 / 2.1});
  give_grad(p, {1, 0.5, -1});
  opt.step();
  // t = 2: m = 0.9 [0.05, -0.1, 0.2] + 0.1 [1, 0.5, -1] = [0.145, -0.04, 0.08], bc1 = 1 - 0.81 = 0.19
  //        v = 0.999 [0.00025, 0.001, 0.004] + 0.001 [1, 0.25, 1] = [0.00124975, 0.001249, 0.004996]
  //        bc2 = 1 - 0.999^2 = 0.001999
  //        m_hat = m / 0.19 = [0.763157894737, -0.210526315789, 0.421052631579]
  //        sqrt(v_hat) = sqrt(v / 0.001999) = [0.790688050875, 0.790450761403, 1.580901522807]
  //        p -= 0.1 m_hat / (sqrt(v_hat) + 0.1)
  check_values(p, {0.8309848284532867, -1.8854482412517928, 0.3797126900478923});
  NamedTensors s = opt.state();
  REQUIRE(s.size() == 3);
  CHECK(s[0].first == "optim.exp_avg.w");
  CHECK(s[1].first == "optim.exp_avg_sq.w");
  CHECK(s[2].first == "optim.step.w");
  check_values(s[0].second, {0.145, -0.04, 0.08});
  check_values(s[1].second, {0.00124975, 0.001249, 0.004996});
  CHECK(s[2].second.dtype() == DType::I64);
  CHECK(s[2].second.item() == 2);
}

TEST_CASE("optim: AdamW decays decoupled, Adam adds L2 to the grad") {
  const std::vector<double> p0 = {1, -2, 0.5}, g1 = {0.5, -1, 2};
  Tensor a = param(p0), w = param(p0);
  Adam adam({{"w", a}}, 0.1, 0.9, 0.999, 0.1, 0.1);
  AdamW adamw({{"w", w}}, 0.1, 0.9, 0.999, 0.1, 0.1);
  give_grad(a, g1);
  give_grad(w, g1);
  adam.step();
  adamw.step();
  // Adam: g' = g + 0.1 p = [0.6, -1.2, 2.05]; t = 1 so m_hat = g', sqrt(v_hat) = |g'|
  //       p -= 0.1 g' / (|g'| + 0.1)
  check_values(a, {1 - 0.06 / 0.7, -2 + 0.12 / 1.3, 0.5 - 0.205 / 2.15});
  // AdamW: p *= 1 - 0.1 * 0.1 = 0.99, then the plain Adam step on g: p -= 0.1 g / (|g| + 0.1)
  check_values(w, {0.99 - 0.05 / 0.6, -1.98 + 0.1 / 1.1, 0.495 - 0.2 / 2.1});
  give_grad(a, {1, 0.5, -1});
  give_grad(w, {1, 0.5, -1});
  adam.step();
  adamw.step();
  // Adam, t = 2: g' = g + 0.1 p = [1.091428571429, 0.309230769231, -0.959534883721]
  //   m = [0.163142857143, -0.077076923077, 0.088546511628], v = [0.001550856327, 0.001534183669, 0.005119004693]
  check_values(a, {0.8267405548789099, -1.8661303818820982, 0.37724132568160795});
  // AdamW, t = 2: p *= 0.99, then m, v as plain Adam (m = [0.145, -0.04, 0.08]), same step as in the Adam test
  check_values(w, {0.81191816178662, -1.8465573321608837, 0.3707150710002733});

  // The default decay is 0.01: p *= 0.999 before the step.
  Tensor d = param(p0);
  AdamW def({{"w", d}}, 0.1, 0.9, 0.999, 0.1);
  give_grad(d, g1);
  def.step();
  check_values(d, {0.999 - 0.05 / 0.6, -1.998 + 0.1 / 1.1, 0.4995 - 0.2 / 2.1});
}

TEST_CASE("optim: RAdam before rectification takes the un-adapted step") {
  // beta2 = 0.999: rho_inf = 1999, rho_1 = 1, rho_2 = 1999 - 4 * 0.998001 / 0.001999 = 1.9995 (<= 5)
  Tensor p = param({1, -2});
  RAdam opt({{"w", p}}, 0.1);
  give_grad(p, {0.5, -1});
  opt.step();
  // m = 0.1 g = [0.05, -0.1], m_hat = m / 0.1 = g; p -= 0.1 m_hat
  check_values(p, {0.95, -1.9});
  give_grad(p, {1, 0.5});
  opt.step();
  // m = 0.9 [0.05, -0.1] + 0.1 [1, 0.5] = [0.145, -0.04]; m_hat = m / 0.19; p -= 0.1 m_hat
  check_values(p, {0.95 - 0.0145 / 0.19, -1.9 + 0.004 / 0.19});

  // L2 weight decay 0.1: g' = g + 0.1 p = [0.6, -1.2]; p -= 0.1 g'
  Tensor q = param({1, -2});
  RAdam wd({{"w", q}}, 0.1, 0.9, 0.999, 1e-8, 0.1);
  give_grad(q, {0.5, -1});
  wd.step();
  check_values(q, {0.94, -1.88});
}

TEST_CASE("optim: RAdam switches to the rectified step once rho_t > 5") {
  // Constant grad g = [0.5, -2], lr 0.1, betas (0.9, 0.999), eps 0.01. m_hat = g at every step.
  // rho_5 = 4.996 <= 5: steps 1..5 move p by -0.1 g each.
  Tensor p = param({1, 1});
  RAdam opt({{"w", p}}, 0.1, 0.9, 0.999, 0.01);
  for (int t = 1; t <= 5; ++t) {
    give_grad(p, {0.5, -2});
    opt.step();
    check_values(p, {1 - 0.05 * t, 1 + 0.2 * t});
  }
  // t = 6: bc2 = 1 - 0.999^6 = 0.005985019985, rho_6 = 1999 - 12 * 0.999^6 / bc2 = 5.994163751656 > 5
  //   r = sqrt((rho_6 - 4)(rho_6 - 2) 1999 / (1995 * 1997 * rho_6)) = 0.025821112802
  //   v = bc2 g^2, so sqrt(v) = 0.077362910913 |g| = [0.038681455457, 0.154725821827]
  //   p -= 0.1 m_hat r sqrt(bc2) / (sqrt(v) + 0.01) = [0.002051701650, -0.002425359215]
  give_grad(p, {0.5, -2});
  opt.step();
  check_values(p, {0.7479482983503314, 2.0024253592147505});
  // t = 7: rho_7 = 6.991996, r = 0.032738814410, sqrt(bc2) = 0.083540618654
  //   update = [0.002641495526, -0.003089001242]
  give_grad(p, {0.5, -2});
  opt.step();
  check_values(p, {0.7453068028238813, 2.0055143604566483});
}

TEST_CASE("optim: parameters without a grad are skipped, their state untouched") {
  Tensor a = param({1, 2}), b = param({3, 4});
  Adam opt({{"a", a}, {"b", b}}, 0.1, 0.9, 0.999, 0.1);
  give_grad(a, {1, -1});
  opt.step();
  CHECK(b.to_vector() == std::vector<double>{3, 4});
  NamedTensors s = opt.state();
  REQUIRE(s.size() == 6);
  CHECK(s[3].first == "optim.exp_avg.b");
  CHECK(s[3].second.to_vector() == std::vector<double>{0, 0});
  CHECK(s[5].second.item() == 0);  // b's own step count
  CHECK(s[2].second.item() == 1);
  // b's first update, at the optimizer's second step, is bias-corrected as its own step 1:
  // p -= 0.1 g / (|g| + 0.1)
  opt.zero_grad();
  CHECK(!a.grad().defined());
  give_grad(b, {0.5, -2});
  opt.step();
  check_values(b, {3 - 0.05 / 0.6, 4 + 0.2 / 2.1});
  check_values(a, {1 - 0.1 / 1.1, 2 + 0.1 / 1.1});
  CHECK(opt.steps() == 2);
}

TEST_CASE("optim: state()/load_state round trip continues identically") {
  using Make = std::function<std::unique_ptr<Optimizer>(NamedTensors)>;
  const std::vector<Make> makers = {
      [](NamedTensors p) { return std::make_unique<SGD>(std::move(p), 0.05, 0.9, 0.01, true); },
      [](NamedTensors p) { return std::make_unique<Adam>(std::move(p), 0.01, 0.9, 0.99, 1e-8, 0.01); },
      [](NamedTensors p) { return std::make_unique<AdamW>(std::move(p), 0.01); },
      [](NamedTensors p) { return std::make_unique<RAdam>(std::move(p), 0.01, 0.9, 0.9); },
  };
  for (DType dtype : {DType::F32, DType::F64})
    for (const Make& make : makers) {
      Rng rng(7);
      Tensor w = randn({3, 4}, rng, dtype), b = randn({4}, rng, dtype);
      auto grads_at = [&](int step, const Tensor& p) {
        Rng r(100 + uint64_t(step));
        return randn(p.shape(), r, dtype);
      };
      std::unique_ptr<Optimizer> a = make({{"w", w}, {"b", b}});
      auto run = [&](Optimizer& opt, Tensor pw, Tensor pb, int from, int to) {
        for (int s = from; s < to; ++s) {
          pw.set_grad(grads_at(s, pw));
          if (s % 3 != 1) pb.set_grad(grads_at(s + 50, pb));  // b skips some steps
          opt.step();
          opt.zero_grad();
        }
      };
      run(*a, w, b, 0, 8);  // far enough for RAdam (beta2 = 0.9) to be rectified
      NamedTensors saved = a->state();
      Tensor w2 = w.clone(), b2 = b.clone();
      run(*a, w, b, 8, 12);
      std::unique_ptr<Optimizer> c = make({{"w", w2}, {"b", b2}});
      c->load_state(saved, 8);
      CHECK(c->steps() == 8);
      run(*c, w2, b2, 8, 12);
      CHECK(w2.to_vector() == w.to_vector());
      CHECK(b2.to_vector() == b.to_vector());
      NamedTensors sa = a->state(), sc = c->state();
      REQUIRE(sa.size() == sc.size());
      for (size_t i = 0; i < sa.size(); ++i) CHECK(sa[i].second.to_vector() == sc[i].second.to_vector());
    }
}

TEST_CASE("optim: load_state checks names and shapes and changes nothing on error") {
  Tensor w = param({1, 2});
  Adam opt({{"w", w}}, 0.1);
  NamedTensors good = {{"optim.exp_avg.w", full({2}, 1.0, DType::F64)},
                       {"optim.exp_avg_sq.w", full({2}, 2.0, DType::F64)},
                       {"optim.step.w", scalar_tensor(5, DType::I64)},
                       {"model.w", zeros({7})}};  // not optimizer state: ignored
  NamedTensors bad_shape = good;
  bad_shape[1].second = zeros({3}, DType::F64);
  CHECK_THROWS_WITH(opt.load_state(bad_shape, 5),
                    "Adam: load_state: state 'optim.exp_avg_sq.w' has shape [3], expected [2]");
  CHECK(opt.state()[0].second.to_vector() == std::vector<double>{0, 0});  // exp_avg was not copied
  NamedTensors missing(good.begin() + 1, good.end());
  CHECK_THROWS_WITH(opt.load_state(missing, 5), "Adam: load_state: missing state 'optim.exp_avg.w'");
  NamedTensors extra = good;
  extra.emplace_back("optim.momentum_buffer.w", zeros({2}, DType::F64));
  CHECK_THROWS_WITH(opt.load_state(extra, 5), "Adam: load_state: unexpected state 'optim.momentum_buffer.w'");
  NamedTensors twice = good;
  twice.push_back(good[0]);
  CHECK_THROWS_WITH(opt.load_state(twice, 5), "Adam: load_state: state 'optim.exp_avg.w' appears twice");
  CHECK_THROWS_WITH(opt.load_state(good, -1), "Adam: load_state: steps must be >= 0, got -1");
  CHECK(opt.steps() == 0);
  opt.load_state(good, 5);
  CHECK(opt.steps() == 5);
  NamedTensors s = opt.state();
  CHECK(s[0].second.to_vector() == std::vector<double>{1, 1});
  CHECK(s[2].second.item() == 5);
  // state() hands out copies: stepping does not change what was saved.
  give_grad(w, {1, 1});
  opt.step();
  CHECK(s[0].second.to_vector() == std::vector<double>{1, 1});
  CHECK(opt.state()[2].second.item() == 6);
}

TEST_CASE("optim: Adam drives a quadratic to its minimum") {
  // f(x) = sum(a * (x - c)^2) with different curvatures; Adam with a cosine decay of the rate.
  Tensor x = param({5, -3, 0.5});
  Tensor c = from_vector(std::vector<double>{1, 2, -4}, {3}, DType::F64);
  Tensor a = from_vector(std::vector<double>{0.1, 1, 10}, {3}, DType::F64);
  Adam opt({{"x", x}}, 0.1);
  WarmupCosineSchedule sched(0.1, 50, 3000);
  for (int i = 0; i < 3000; ++i) {
    opt.zero_grad();
    Tensor d = x - c;
    sum(a * d * d).backward();
    opt.set_lr(sched.lr(opt.steps()));
    opt.step();
  }
  std::vector<double> got = x.to_vector();
  for (size_t i = 0; i < 3; ++i) CHECK(std::abs(got[i] - c.to_vector()[i]) < 1e-4);
}

TEST_CASE("optim: f32 parameters and large tensors (threaded loops) agree with f64") {
  Rng rng(3);
  Tensor p64 = randn({70000}, rng, DType::F64), g64 = randn({70000}, rng, DType::F64);
  Tensor p32 = p64.to(DType::F32), g32 = g64.to(DType::F32), start = p64.clone();
  Adam a64({{"p", p64}}, 0.01), a32({{"p", p32}}, 0.01);
  p64.set_grad(g64);
  p32.set_grad(g32);
  for (int i = 0; i < 3; ++i) {
    a64.step();
    a32.step();
  }
  CHECK(test::max_abs_diff(p32.to(DType::F64), p64) < 1e-6);
  // A constant grad gives m_hat = g and sqrt(v_hat) = |g| at every step: each of the 3 steps moves
  // p by -0.01 g / (|g| + 1e-8).
  std::vector<double> p0 = start.to_vector(), g = g64.to_vector(), got = p64.to_vector();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - (p0[i] - 0.03 * g[i] / (std::abs(g[i]) + 1e-8))));
  CHECK(worst < 1e-12);
}

TEST_CASE("optim: hyper-parameter, parameter and grad errors name the optimizer") {
  Tensor w = param({1, 2});
  NamedTensors ps = {{"w", w}};
  CHECK_THROWS_WITH(SGD(ps, -1), "SGD: lr must be finite and >= 0, got -1");
  CHECK_THROWS_WITH(SGD(ps, 0.1, -0.5), "SGD: momentum must be finite and >= 0, got -0.5");
  CHECK_THROWS_WITH(SGD(ps, 0.1, 0, 0, true), "SGD: nesterov needs momentum > 0");
  CHECK_THROWS_WITH(Adam(ps, 0.1, 1), "Adam: beta1 must be in [0, 1), got 1");
  CHECK_THROWS_WITH(RAdam(ps, 0.1, 0.9, -0.1), "RAdam: beta2 must be in [0, 1), got -0.1");
  CHECK_THROWS_WITH(AdamW(ps, 0.1, 0.9, 0.999, 0), "AdamW: eps must be finite and > 0, got 0");
  CHECK_THROWS_WITH(AdamW(ps, 0.1, 0.9, 0.999, 1e-8, -1), "AdamW: weight_decay must be finite and >= 0, got -1");
  CHECK_THROWS_WITH(Adam(ps, std::nan("")), "Adam: lr must be finite and >= 0, got nan");
  CHECK_THROWS_WITH(SGD({}, 0.1), "SGD: no parameters to optimize");
  CHECK_THROWS_WITH(SGD({{"w", w}, {"w", param({1})}}, 0.1), "SGD: parameter name 'w' appears twice");
  CHECK_THROWS_WITH(SGD({{"w", w}, {"v", w.detach()}}, 0.1), "SGD: parameter 'v' shares its data with 'w'");
  CHECK_THROWS_WITH(SGD({{"i", zeros({2}, DType::I64)}}, 0.1),
                    "SGD: parameter 'i' is i64; parameters are f32 or f64");
  CHECK_THROWS_WITH(SGD({{"t", transpose(zeros({2, 3}))}}, 0.1),
                    "SGD: parameter 't' of shape [3, 2] is not contiguous");
  CHECK_THROWS_WITH(SGD({{"", w}}, 0.1), "SGD: parameter 0 has an empty name");

  Tensor v = param({3, 4});
  Adam opt({{"w", w}, {"v", v}}, 0.1);
  CHECK_THROWS_WITH(opt.set_lr(-0.1), "Adam: lr must be finite and >= 0, got -0.1");
  give_grad(w, {1, 1});
  v.set_grad(zeros({2}, DType::F32));
  CHECK_THROWS_WITH(opt.step(), "Adam: gradient of 'v' is f32 but the parameter is f64");
  CHECK(w.to_vector() == std::vector<double>{1, 2});  // checked before any update
  CHECK(opt.steps() == 0);
}

TEST_CASE("optim: a non-contiguous grad is read through its strides") {
  Tensor p = from_vector(std::vector<double>{0, 0, 0, 0, 0, 0}, {2, 3}, DType::F64);
  p.set_requires_grad();
  p.set_grad(transpose(from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2}, DType::F64)));
  SGD opt({{"p", p}}, 1);
  opt.step();
  // grad = [[1, 3, 5], [2, 4, 6]]; p -= grad
  CHECK(p.to_vector() == std::vector<double>{-1, -3, -5, -2, -4, -6});
}

TEST_CASE("clip_grad_norm: global norm, scaling, untouched below the limit or when non-finite") {
  Tensor a = param({3, 4}), b = param({12}), none = param({100});
  give_grad(a, {3, 4});
  give_grad(b, {12});
  // norm = sqrt(9 + 16 + 144) = 13; none has no grad and is skipped; a listed twice counts once
  CHECK(clip_grad_norm({a, b, none, a}, 20) == 13);
  CHECK(a.grad().to_vector() == std::vector<double>{3, 4});
  const double c = 6.5 / (13 + 1e-6);
  CHECK(clip_grad_norm({a, b, none, a}, 6.5) == 13);
  check_values(a.grad(), {3 * c, 4 * c});
  check_values(b.grad(), {12 * c});
  CHECK(clip_grad_norm({a, b}, 100) == doctest::Approx(13 * c).epsilon(1e-12));  // just under 6.5

  give_grad(b, {std::numeric_limits<double>::infinity()});
  CHECK(std::isinf(clip_grad_norm({a, b}, 1)));
  CHECK(a.grad().to_vector() == std::vector<double>{3 * c, 4 * c});
  give_grad(b, {std::nan("")});
  CHECK(std::isnan(clip_grad_norm({a, b}, 1)));
  CHECK(a.grad().to_vector() == std::vector<double>{3 * c, 4 * c});
  CHECK(clip_grad_norm({none}, 1) == 0);
  CHECK_THROWS_WITH(clip_grad_norm({a}, -1), "clip_grad_norm: max_norm must be >= 0, got -1");
}

TEST_CASE("clip_grad_norm: large, f32 and non-contiguous grads") {
  Tensor big = zeros({100000});  // more than one block: the threaded, blocked sum
  big.set_requires_grad();
  big.set_grad(full({100000}, 0.5));
  Tensor t = zeros({3, 2}, DType::F64);
  t.set_requires_grad();
  t.set_grad(transpose(from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, DType::F64)));
  // norm^2 = 100000 * 0.25 + (1 + 4 + 9 + 16 + 25 + 36) = 25091
  const double norm = std::sqrt(25091.0);
  CHECK(clip_grad_norm({big, t}, 1) == doctest::Approx(norm).epsilon(1e-12));
  const double c = 1 / (norm + 1e-6);
  CHECK(big.grad().at({99999}) == doctest::Approx(0.5 * c).epsilon(1e-6));
  // t's grad is a transposed view: [[1, 4], [2, 5], [3, 6]], scaled through its strides
  check_values(t.grad(), {1 * c, 4 * c, 2 * c, 5 * c, 3 * c, 6 * c});
}

TEST_CASE("gradient accumulation: two half-batch passes with loss / 2 equal one full pass") {
  Tensor x = test::uniform({4, 3}, 1), y = test::uniform({4, 2}, 2);
  Tensor w = test::uniform({3, 2}, 3);
  w.set_requires_grad();
  auto loss = [&](const Tensor& xb, const Tensor& yb) {
    Tensor d = matmul(xb, w) - yb;
    return mean(d * d);
  };
  loss(x, y).backward();
  Tensor full_grad = w.grad();
  w.zero_grad();
  (loss(narrow(x, 0, 0, 2), narrow(y, 0, 0, 2)) * 0.5).backward();
  Tensor half = w.grad().clone();
  (loss(narrow(x, 0, 2, 2), narrow(y, 0, 2, 2)) * 0.5).backward();
  CHECK(test::max_abs_diff(half, full_grad) > 1e-3);  // one half alone is not the full gradient
  CHECK(test::allclose(w.grad(), full_grad, 1e-12, 1e-14));
}
