// The `talking-heads` variant (models/attention/talking_heads.h): identity mixing is softmax attention, random
// mixing equals a naive double loop, causal leakage, finite-difference gradients of q, k, v, P_l and P_w, and
// the masks and options it refuses.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "models/attention/talking_heads.h"
#include "ops/attention_naive.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

AttentionOptions opt(const std::string& key, const std::string& value) {
  AttentionOptions o;
  o.set(key, value);
  return o;
}

std::unique_ptr<Attention> make_th(int64_t heads = 3, AttentionOptions opts = {}) {
  AttentionConfig cfg;
  cfg.heads = heads, cfg.head_dim = 3;
  cfg.options = std::move(opts);
  return make_attention("talking-heads", cfg);
}

// The paper's pseudo-code by loops in double, per (b, i, j): J_h = q·k·scale, L_h' = Σ_h J_h P_l[h, h'] (then
// -inf for keys j >= end), W = softmax_j(L), U_h = Σ_h' W_h' P_w[h', h], out_h = Σ_j U_h v_h.
Tensor naive_th(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pl, const Tensor& pw,
                const AttentionMask& mask, double scale) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Lk = k.size(2), Dv = v.size(3);
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Lq; ++i) {
      const int64_t end = attention_key_end(mask, b, i, Lk);
      std::vector<double> J(size_t(H * Lk)), W(size_t(H * Lk), 0.0);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < Lk; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += q.at({b, h, i, d}) * k.at({b, h, j, d});
          J[size_t(h * Lk + j)] = s * scale;
        }
      for (int64_t h2 = 0; h2 < H; ++h2) {
        std::vector<double> L(static_cast<size_t>(end));
        double mx = -std::numeric_limits<double>::infinity(), z = 0;
        for (int64_t j = 0; j < end; ++j) {
          double s = 0;
          for (int64_t h = 0; h < H; ++h) s += J[size_t(h * Lk + j)] * pl.at({h, h2});
          L[size_t(j)] = s;
          mx = std::max(mx, s);
        }
        for (int64_t j = 0; j < end; ++j) z += std::exp(L[size_t(j)] - mx);
        for (int64_t j = 0; j < end; ++j) W[size_t(h2 * Lk + j)] = std::exp(L[size_t(j)] - mx) / z;
      }
      for (int64_t h = 0; h < H; ++h)
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < Lk; ++j) {
            double u = 0;
            for (int64_t h2 = 0; h2 < H; ++h2) u += W[size_t(h2 * Lk + j)] * pw.at({h2, h});
            acc += u * v.at({b, h, j, e});
          }
          out.set_at({b, h, i, e}, acc);
        }
    }
  return out;
}

}  // namespace

TEST_CASE("talking-heads: identity mixing (the initialisation) == softmax attention (naive reference)") {
  auto a = make_th();
  CHECK(a->name() == "talking-heads");
  a->to(DType::F64);
  const Tensor q = uniform({2, 3, 5, 3}, 1, -2, 2), k = uniform({2, 3, 6, 3}, 2, -2, 2), v = uniform({2, 3, 6, 2}, 3);
  const double scale = 1.0 / std::sqrt(3.0);
  CHECK(max_abs_diff(a->forward(q, k, v, {}), naive_attention(q, k, v, {}, scale)) < 1e-15);
  AttentionMask m;
  m.causal = true;
  m.key_lengths = {6, 3};
  m.bias = uniform({1, 3, 5, 6}, 4);
  m.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25, 0.125}, {3}, DType::F64);
  CHECK(max_abs_diff(a->forward(q, k, v, m), naive_attention(q, k, v, m, scale)) < 1e-15);
}

TEST_CASE("talking-heads: random P_l, P_w == a naive double loop (f64 and f32), with causal and padding masks") {
  const Tensor q = uniform({2, 3, 5, 3}, 5, -2, 2), k = uniform({2, 3, 5, 3}, 6, -2, 2), v = uniform({2, 3, 5, 2}, 7);
  const Tensor pl = uniform({3, 3}, 8), pw = uniform({3, 3}, 9);
  for (bool causal : {false, true}) {
    AttentionMask m;
    m.causal = causal;
    m.key_lengths = {5, 2};
    const Tensor want = naive_th(q, k, v, pl, pw, m, 0.7);
    CHECK(max_abs_diff(talking_heads_attention(q, k, v, pl, pw, m, 0.7), want) < 1e-13);
    const Tensor y32 = talking_heads_attention(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32),
                                               pl.to(DType::F32), pw.to(DType::F32), m, 0.7);
    CHECK(y32.dtype() == DType::F32);
    CHECK(max_abs_diff(y32, want) < 1e-5);
  }
  // the module uses its parameters and the 1/sqrt(D) default
  auto a = make_th();
  a->to(DType::F64);
  auto* th = dynamic_cast<TalkingHeadsAttention*>(a.get());
  th->p_l().copy_from(pl);
  th->p_w().copy_from(pw);
  CHECK(max_abs_diff(a->forward(q, k, v, {}), naive_th(q, k, v, pl, pw, {}, 1.0 / std::sqrt(3.0))) < 1e-13);
}

TEST_CASE("talking-heads: causal form does not leak (future k, v, q leave earlier rows unchanged, zero gradient)") {
  const Tensor pl = uniform({3, 3}, 10), pw = uniform({3, 3}, 11);
  std::vector<Tensor> x{uniform({2, 3, 7, 3}, 12), uniform({2, 3, 7, 3}, 13), uniform({2, 3, 7, 2}, 14)};
  AttentionMask m;
  m.causal = true;
  const Tensor y = talking_heads_attention(x[0], x[1], x[2], pl, pw, m, 0.5);
  const int64_t cut = 4;
  std::vector<Tensor> x2;
  for (size_t i = 0; i < 3; ++i) {
    Tensor t = x[i].clone();
    Tensor tail = narrow(t, 2, cut, 7 - cut);
    tail.copy_from(uniform(tail.shape(), 20 + i, -30, 30));
    t.set_requires_grad(true);
    x2.push_back(t);
  }
  const Tensor y2 = talking_heads_attention(x2[0], x2[1], x2[2], pl, pw, m, 0.5);
  CHECK(max_abs_diff(narrow(y2, 2, 0, cut), narrow(y, 2, 0, cut)) == 0);
  sum(narrow(y2, 2, 0, cut)).backward();
  for (const Tensor& t : x2)
    for (double g : narrow(t.grad(), 2, cut, 7 - cut).to_vector()) CHECK(g == 0);
}

TEST_CASE("talking-heads: finite-difference gradients of q, k, v, P_l and P_w (f64), causal and padded") {
  const std::vector<Tensor> in{uniform({2, 3, 4, 3}, 15), uniform({2, 3, 4, 3}, 16), uniform({2, 3, 4, 2}, 17),
                               uniform({3, 3}, 18), uniform({3, 3}, 19)};
  AttentionMask m;
  m.causal = true;
  m.key_lengths = {4, 2};
  check_gradients([m](auto x) { return talking_heads_attention(x[0], x[1], x[2], x[3], x[4], m, 0.6); }, in);
  // through the module: its parameters P_l and P_w
  auto a = make_th();
  a->to(DType::F64);
  auto* th = dynamic_cast<TalkingHeadsAttention*>(a.get());
  th->p_l().copy_from(in[3]);
  th->p_w().copy_from(in[4]);
  eng::test::check_parameter_gradients(a->named_parameters(), [&] { return a->forward(in[0], in[1], in[2], m); });
}

TEST_CASE("talking-heads: per-head keep masks, wrong shapes and bad options are refused") {
  auto a = make_th();
  const Tensor q = uniform({1, 3, 4, 3}, 1).to(DType::F32), v = uniform({1, 3, 4, 2}, 2).to(DType::F32);
  AttentionMask m;
  m.keep = ones({1, 3, 4, 4});
  CHECK_THROWS_WITH(a->forward(q, q, v, m),
                    "attention 'talking-heads': a keep mask must be the same for every head (P_w mixes the weights of "
                    "all heads, so a key hidden from one head would return through another), got keep [1, 3, 4, 4] "
                    "for q [1, 3, 4, 3]");
  m.keep = ones({1, 1, 4, 4});  // shared by the heads: fine
  CHECK(a->forward(q, q, v, m).shape() == Shape{1, 3, 4, 2});
  const Tensor q2 = uniform({1, 2, 4, 3}, 3).to(DType::F32), v2 = uniform({1, 2, 4, 2}, 4).to(DType::F32);
  CHECK_THROWS_WITH(a->forward(q2, q2, v2, {}), "attention 'talking-heads': built for 3 heads, got q [1, 2, 4, 3]");
  CHECK_THROWS_WITH(talking_heads_attention(q, q, v, ones({2, 2}), ones({3, 3}), {}, 1.0),
                    "attention 'talking-heads': P_l [2, 2] and P_w [3, 3] must be [3, 3] for q [1, 3, 4, 3]");
  CHECK_THROWS_WITH(make_th(3, opt("scale", "-1")),
                    "attention 'talking-heads': option scale expects a finite number > 0, got '-1'");
  CHECK_THROWS_WITH(make_th(3, opt("mix", "1")), "attention 'talking-heads': unknown option 'mix'");
}
