// The `linformer` variant (models/attention/linformer.h): identity projections give softmax attention, a naive
// loop of Eq. 7 for every sharing mode, finite-difference gradients of q, k, v, E and F, key padding, and errors.
#include <cmath>
#include <string>
#include <vector>

#include "engine/error.h"
#include "models/attention/linformer.h"
#include "ops/attention_naive.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::check_parameter_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

std::unique_ptr<Attention> make_linformer(int64_t max_len, int64_t k, const std::string& share, uint64_t seed = 7) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 3, cfg.max_len = max_len, cfg.seed = seed;
  cfg.options.set("k", std::to_string(k));
  cfg.options.set("share", share);
  return make_attention("linformer", cfg);
}

LinformerAttention& as_linformer(const std::unique_ptr<Attention>& a) {
  auto* l = dynamic_cast<LinformerAttention*>(a.get());
  REQUIRE(l != nullptr);
  return *l;
}

// Entry (r, j) of head h's projection: p is [H, k, max_len] (share=none) or [k, max_len].
double proj(const Tensor& p, int64_t h, int64_t r, int64_t j) { return p.dim() == 3 ? p.at({h, r, j}) : p.at({r, j}); }

// Eq. 7 by loops in double: K'_r = Σ_{j < len} E[r, j] k_j, V'_r = Σ_{j < len} F[r, j] v_j over the real keys,
// out_i = Σ_r softmax_r(q_i·K'_r / √D) V'_r.
Tensor naive_linformer(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& e, const Tensor& f,
                       const std::vector<int64_t>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), n = k.size(2), Dv = v.size(3);
  const int64_t kp = e.size(-2);
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t len = lengths.empty() ? n : lengths[size_t(b)];
      std::vector<double> kk(size_t(kp * D), 0.0), vv(size_t(kp * Dv), 0.0);
      for (int64_t r = 0; r < kp; ++r)
        for (int64_t j = 0; j < len; ++j) {
          for (int64_t d = 0; d < D; ++d) kk[size_t(r * D + d)] += proj(e, h, r, j) * k.at({b, h, j, d});
          for (int64_t d = 0; d < Dv; ++d) vv[size_t(r * Dv + d)] += proj(f, h, r, j) * v.at({b, h, j, d});
        }
      for (int64_t i = 0; i < Lq; ++i) {
        std::vector<double> w(static_cast<size_t>(kp));
        double mx = -1e300, z = 0;
        for (int64_t r = 0; r < kp; ++r) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += q.at({b, h, i, d}) * kk[size_t(r * D + d)];
          w[size_t(r)] = s / std::sqrt(double(D));
          mx = std::max(mx, w[size_t(r)]);
        }
        for (double& x : w) z += (x = std::exp(x - mx));
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t r = 0; r < kp; ++r) acc += w[size_t(r)] / z * vv[size_t(r * Dv + d)];
          out.set_at({b, h, i, d}, acc);
        }
      }
    }
  return out;
}

const char* const kShares[] = {"none", "headwise", "kv"};

}  // namespace

TEST_CASE("linformer: k = n with E = F = identity is softmax attention (f64, every share mode)") {
  const Tensor q = uniform({2, 2, 5, 3}, 1, -2, 2), k = uniform({2, 2, 6, 3}, 2, -2, 2), v = uniform({2, 2, 6, 4}, 3);
  const Tensor want = naive_attention(q, k, v, {}, 1.0 / std::sqrt(3.0));
  for (const char* share : kShares) {
    CAPTURE(share);
    auto attn = make_linformer(6, 6, share);
    attn->to(DType::F64);
    for (const auto& named : attn->named_parameters()) {
      Tensor p = named.second;
      double* d = p.data<double>();
      for (int64_t i = 0; i < p.numel(); ++i) d[i] = (i % 36) / 6 == i % 6 ? 1.0 : 0.0;  // I_6 in each [6, 6]
    }
    CHECK(max_abs_diff(attn->forward(q, k, v, {}), want) < 1e-12);
  }
}

TEST_CASE("linformer == a naive loop of Eq. 7 with random E, F for every share mode, padding, n < max_len, f32") {
  const Tensor q = uniform({2, 2, 4, 3}, 4, -2, 2), k = uniform({2, 2, 6, 3}, 5, -2, 2), v = uniform({2, 2, 6, 2}, 6);
  for (const char* share : kShares) {
    CAPTURE(share);
    auto attn = make_linformer(8, 5, share);  // n = 6 < max_len = 8: the first 6 columns of E and F
    auto& lin = as_linformer(attn);
    CHECK(attn->name() == "linformer");
    CHECK(lin.projected_length() == 5);
    const Tensor y32 = attn->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), {});
    CHECK(y32.dtype() == DType::F32);
    attn->to(DType::F64);
    const Tensor e = lin.e(), f = lin.f();
    CHECK(max_abs_diff(attn->forward(q, k, v, {}), naive_linformer(q, k, v, e, f, {})) < 1e-13);
    CHECK(max_abs_diff(y32, naive_linformer(q, k, v, e, f, {})) < 1e-5);
    AttentionMask m;
    m.key_lengths = {3, 6};
    CHECK(max_abs_diff(attn->forward(q, k, v, m), naive_linformer(q, k, v, e, f, m.key_lengths)) < 1e-13);
    // k > n: 5 projected rows from 3 keys is still exactly Eq. 7
    const Tensor k3 = narrow(k, 2, 0, 3), v3 = narrow(v, 2, 0, 3);
    CHECK(max_abs_diff(attn->forward(q, k3, v3, {}), naive_linformer(q, k3, v3, e, f, {})) < 1e-13);
  }
}

TEST_CASE("linformer: parameters per share mode, N(0, 1/k) init from the seed, default k = min(256, max_len)") {
  auto none = make_linformer(8, 4, "none");
  auto headwise = make_linformer(8, 4, "headwise");
  auto kv = make_linformer(8, 4, "kv");
  auto names = [](const std::unique_ptr<Attention>& a) {
    std::string s;
    for (const auto& named : a->named_parameters()) s += named.first + shape_str(named.second.shape()) + " ";
    return s;
  };
  CHECK(names(none) == "E[2, 4, 8] F[2, 4, 8] ");
  CHECK(names(headwise) == "E[4, 8] F[4, 8] ");
  CHECK(names(kv) == "E[4, 8] ");
  CHECK(as_linformer(kv).e().impl() == as_linformer(kv).f().impl());
  CHECK(max_abs_diff(as_linformer(headwise).e(), as_linformer(make_linformer(8, 4, "headwise")).e()) == 0);
  CHECK(max_abs_diff(as_linformer(headwise).e(), as_linformer(make_linformer(8, 4, "headwise", 8)).e()) > 0);
  CHECK(max_abs_diff(as_linformer(headwise).e(), as_linformer(headwise).f()) > 0);
  // sample variance of 2 * 16 * 64 entries against 1/k = 1/16: its standard error is about 4%
  auto big = make_linformer(64, 16, "none");
  double s2 = 0;
  int64_t count = 0;
  for (const auto& named : big->named_parameters())
    for (double x : named.second.to_vector()) s2 += x * x, ++count;
  CHECK(std::abs(s2 / double(count) * 16 - 1) < 0.15);

  AttentionConfig cfg;
  cfg.max_len = 16;
  CHECK(as_linformer(make_attention("linformer", cfg)).projected_length() == 16);
  cfg.max_len = 300;
  CHECK(as_linformer(make_attention("linformer", cfg)).projected_length() == 256);
}

TEST_CASE("linformer: finite-difference gradients of q, k, v and of E, F (f64), with padding") {
  for (const char* share : kShares) {
    CAPTURE(share);
    auto attn = make_linformer(6, 4, share);
    attn->to(DType::F64);
    Attention* a = attn.get();
    const std::vector<Tensor> qkv{uniform({2, 2, 3, 3}, 7), uniform({2, 2, 5, 3}, 8), uniform({2, 2, 5, 2}, 9)};
    AttentionMask m;
    m.key_lengths = {2, 5};
    check_gradients([a, m](auto x) { return a->forward(x[0], x[1], x[2], m); }, qkv);
    check_parameter_gradients(attn->named_parameters(), [&] { return a->forward(qkv[0], qkv[1], qkv[2], m); });
  }
  auto attn = make_linformer(6, 4, "none");
  attn->to(DType::F64);
  Attention* a = attn.get();
  check_gradients([a](auto x) { return a->forward(permute(x[0], {0, 2, 1, 3}), x[1], x[2], {}); },
                  {uniform({2, 4, 2, 3}, 10), uniform({2, 2, 6, 3}, 11), uniform({2, 2, 6, 2}, 12)});
}

TEST_CASE("linformer: padded keys and values, even 1e9, do not move the output or get a gradient") {
  auto attn = make_linformer(6, 4, "headwise");
  attn->to(DType::F64);
  const Tensor q = uniform({2, 2, 4, 3}, 13), k = uniform({2, 2, 6, 3}, 14), v = uniform({2, 2, 6, 2}, 15);
  AttentionMask m;
  m.key_lengths = {2, 5};
  const Tensor ref = attn->forward(q, k, v, m);
  Tensor k2 = k.clone(), v2 = v.clone();
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t j = 2; j < 6; ++j) {
      for (int64_t d = 0; d < 3; ++d) k2.set_at({0, h, j, d}, 1e9);
      for (int64_t d = 0; d < 2; ++d) v2.set_at({0, h, j, d}, -1e9);
    }
    for (int64_t d = 0; d < 3; ++d) k2.set_at({1, h, 5, d}, 1e9);
    for (int64_t d = 0; d < 2; ++d) v2.set_at({1, h, 5, d}, 1e9);
  }
  k2.set_requires_grad(true);
  v2.set_requires_grad(true);
  const Tensor y = attn->forward(q, k2, v2, m);
  CHECK(max_abs_diff(y, ref) == 0);
  y.backward(uniform(y.shape(), 16));
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 2; j < 6; ++j) {
      CHECK(k2.grad().at({0, h, j, 1}) == 0);
      CHECK(v2.grad().at({0, h, j, 0}) == 0);
    }
}

TEST_CASE("linformer: causal, n > max_len, bad options and per-pair masks are refused with clear errors") {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 3, cfg.max_len = 6;
  AttentionConfig causal = cfg;
  causal.causal = true;
  CHECK_THROWS_WITH(make_attention("linformer", causal),
                    "attention 'linformer': does not take a causal mask (its projected keys mix every position, "
                    "future ones included, and it forms no (query, key) logits); it takes: non-causal, key padding, "
                    "cross-attention");
  AttentionConfig unbounded = cfg;
  unbounded.max_len = 0;
  CHECK_THROWS_WITH(make_attention("linformer", unbounded),
                    "attention 'linformer': needs max_len >= 1 (E and F have one column per position), got 0");
  AttentionConfig opt = cfg;
  opt.options.set("k", "7");
  CHECK_THROWS_WITH(make_attention("linformer", opt), "attention 'linformer': option k expects an integer in 1..6, got "
                                                      "'7'");
  opt.options.set("k", "0");
  CHECK_THROWS_WITH(make_attention("linformer", opt), "attention 'linformer': option k expects an integer in 1..6, got "
                                                      "'0'");
  AttentionConfig share = cfg;
  share.options.set("share", "layerwise");
  CHECK_THROWS_WITH(make_attention("linformer", share),
                    "attention 'linformer': option share must be none, headwise or kv, got 'layerwise'");
  AttentionConfig unknown = cfg;
  unknown.options.set("landmarks", "4");
  CHECK_THROWS_WITH(make_attention("linformer", unknown), "attention 'linformer': unknown option 'landmarks'");

  auto attn = make_linformer(6, 4, "none");
  const Tensor q = uniform({1, 2, 4, 3}, 21), k = uniform({1, 2, 4, 3}, 22), v = uniform({1, 2, 4, 3}, 23);
  attn->to(DType::F64);
  const Tensor k7 = uniform({1, 2, 7, 3}, 24), v7 = uniform({1, 2, 7, 3}, 25);
  CHECK_THROWS_WITH(attn->forward(q, k7, v7, {}),
                    "attention 'linformer': k [1, 2, 7, 3] has 7 positions, more than max_len 6 that E and F were "
                    "built for");
  CHECK_THROWS_WITH(attn->forward(uniform({1, 3, 4, 3}, 26), uniform({1, 3, 4, 3}, 27), uniform({1, 3, 4, 3}, 28), {}),
                    "attention 'linformer': q [1, 3, 4, 3] has 3 heads, the variant was built with one E and F per "
                    "head for 2");
  const std::string why = " (its projected keys mix every position, future ones included, and it forms no (query, "
                          "key) logits); it takes: non-causal, key padding, cross-attention";
  AttentionMask cm;
  cm.causal = true;
  CHECK_THROWS_WITH(attn->forward(q, k, v, cm), ("attention 'linformer': does not take a causal mask" + why).c_str());
  AttentionMask keep;
  keep.keep = ones({4, 4});
  CHECK_THROWS_WITH(attn->forward(q, k, v, keep), ("attention 'linformer': does not take a keep mask" + why).c_str());
  AttentionMask bias;
  bias.bias = zeros({4, 4}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, k, v, bias), ("attention 'linformer': does not take a bias" + why).c_str());
  AttentionMask alibi;
  alibi.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, k, v, alibi), ("attention 'linformer': does not take ALiBi slopes" + why).c_str());
  CHECK(attn->new_state() == nullptr);
}
