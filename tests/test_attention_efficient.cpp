// The `efficient` variant (models/attention/efficient.h) against a naive loop, its gradient, key padding,
// and the masks it refuses.
#include <cmath>
#include <limits>
#include <vector>

#include "models/attention/efficient.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

std::unique_ptr<Attention> make_efficient() {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 3;
  return make_attention("efficient", cfg);
}

// Eq. 4 and 6 by loops in double: out_i = Σ_d softmax_d(q_i) Σ_j softmax_j(k_{:,d})[j] v_j over the keys
// j < length of each batch element.
Tensor naive_efficient(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Lk = k.size(2), Dv = v.size(3);
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t n = lengths.empty() ? Lk : lengths[size_t(b)];
      // rho_k[j * D + d]: softmax over the n real keys of feature d
      std::vector<double> rho_k(size_t(n * D));
      for (int64_t d = 0; d < D; ++d) {
        double z = 0;
        for (int64_t j = 0; j < n; ++j) z += std::exp(k.at({b, h, j, d}));
        for (int64_t j = 0; j < n; ++j) rho_k[size_t(j * D + d)] = std::exp(k.at({b, h, j, d})) / z;
      }
      for (int64_t i = 0; i < Lq; ++i) {
        double zq = 0;
        for (int64_t d = 0; d < D; ++d) zq += std::exp(q.at({b, h, i, d}));
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t d = 0; d < D; ++d)
            for (int64_t j = 0; j < n; ++j)
              acc += std::exp(q.at({b, h, i, d})) / zq * rho_k[size_t(j * D + d)] * v.at({b, h, j, e});
          out.set_at({b, h, i, e}, acc);
        }
      }
    }
  return out;
}

}  // namespace

TEST_CASE("efficient attention == a naive loop of Eq. 4 and 6 (f64 and f32), with and without padding") {
  auto attn = make_efficient();
  CHECK(attn->name() == "efficient");
  const Tensor q = uniform({2, 2, 5, 3}, 1, -3, 3), k = uniform({2, 2, 7, 3}, 2, -3, 3), v = uniform({2, 2, 7, 4}, 3);
  CHECK(eng::test::max_abs_diff(attn->forward(q, k, v, {}), naive_efficient(q, k, v, {})) < 1e-13);
  AttentionMask m;
  m.key_lengths = {4, 7};
  CHECK(eng::test::max_abs_diff(attn->forward(q, k, v, m), naive_efficient(q, k, v, m.key_lengths)) < 1e-13);
  Tensor y32 = attn->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m);
  CHECK(y32.dtype() == DType::F32);
  CHECK(eng::test::max_abs_diff(y32, naive_efficient(q, k, v, m.key_lengths)) < 1e-5);
  // every row of ρ_q ρ_kᵀ sums to 1 (the property it shares with softmax attention): v = 1 gives out = 1
  const Tensor y1 = attn->forward(q, k, ones({2, 2, 7, 4}, DType::F64), m);
  CHECK(eng::test::max_abs_diff(y1, ones({2, 2, 5, 4}, DType::F64)) < 1e-14);
}

TEST_CASE("efficient attention: finite-difference gradient of q, k, v (f64), with padding and strided q") {
  auto attn = make_efficient();
  const std::vector<Tensor> qkv{uniform({2, 2, 5, 3}, 4), uniform({2, 2, 6, 3}, 5), uniform({2, 2, 6, 4}, 6)};
  Attention* a = attn.get();
  check_gradients([a](auto x) { return a->forward(x[0], x[1], x[2], {}); }, qkv);
  AttentionMask m;
  m.key_lengths = {3, 0};  // batch element 1 has no key: zero output, zero gradient, no NaN
  check_gradients([a, m](auto x) { return a->forward(x[0], x[1], x[2], m); }, qkv);
  // q read through permuted strides
  check_gradients([a](auto x) { return a->forward(permute(x[0], {0, 2, 1, 3}), x[1], x[2], {}); },
                  {uniform({2, 5, 2, 3}, 7), qkv[1], qkv[2]});
}

TEST_CASE("efficient attention: padded keys and values, even 1e9, do not move the output or get a gradient") {
  auto attn = make_efficient();
  const Tensor q = uniform({2, 2, 4, 3}, 11), k = uniform({2, 2, 6, 3}, 12), v = uniform({2, 2, 6, 2}, 13);
  AttentionMask m;
  m.key_lengths = {2, 5};
  const Tensor ref = attn->forward(q, k, v, m);
  Tensor k2 = k.clone(), v2 = v.clone();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 2; j < 6; ++j) {
      for (int64_t d = 0; d < 3; ++d) k2.set_at({0, h, j, d}, 1e9);
      for (int64_t e = 0; e < 2; ++e) v2.set_at({0, h, j, e}, 1e9);
      for (int64_t d = 0; d < 3; ++d) k2.set_at({1, h, 5, d}, 1e9);
      for (int64_t e = 0; e < 2; ++e) v2.set_at({1, h, 5, e}, -1e9);
    }
  k2.set_requires_grad(true);
  v2.set_requires_grad(true);
  const Tensor y = attn->forward(q, k2, v2, m);
  CHECK(eng::test::max_abs_diff(y, ref) == 0);
  y.backward(uniform(y.shape(), 14));
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 2; j < 6; ++j) {
      CHECK(k2.grad().at({0, h, j, 0}) == 0);
      CHECK(v2.grad().at({0, h, j, 1}) == 0);
    }
  // a fully padded batch element gives exact zeros
  m.key_lengths = {0, 6};
  const Tensor z = attn->forward(q, k2, v2, m);
  for (double x : narrow(z, 0, 0, 1).to_vector()) CHECK(x == 0);
}

TEST_CASE("efficient attention: causal, keep, bias and ALiBi are refused with the shapes named") {
  const Tensor q = uniform({1, 2, 4, 3}, 21), k = uniform({1, 2, 4, 3}, 22), v = uniform({1, 2, 4, 3}, 23);
  auto attn = make_efficient();
  AttentionMask causal;
  causal.causal = true;
  CHECK_THROWS_WITH(attn->forward(q, k, v, causal),
                    "attention 'efficient': does not take a causal mask (every key enters the shared context, and no "
                    "(query, key) logit is ever formed); it takes: non-causal, key padding, cross-attention");
  const std::string refused = "attention 'efficient': does not take ", why =
      " (every key enters the shared context, and no (query, key) logit is ever formed); it takes: non-causal, key "
      "padding, cross-attention";
  AttentionMask keep;
  keep.keep = ones({4, 4});
  CHECK_THROWS_WITH(attn->forward(q, k, v, keep), (refused + "a keep mask" + why).c_str());
  AttentionMask bias;
  bias.bias = zeros({4, 4}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, k, v, bias), (refused + "a bias" + why).c_str());
  AttentionMask alibi;
  alibi.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, k, v, alibi), (refused + "ALiBi slopes" + why).c_str());
  AttentionMask lengths;
  lengths.key_lengths = {5};
  CHECK_THROWS_WITH(attn->forward(q, k, v, lengths), "attention 'efficient': key_lengths[0] = 5 is outside [0, 4]");
  CHECK_THROWS_WITH(attn->step(q, k, v, *std::make_unique<AttentionState>(), {}),
                    "attention 'efficient': no recurrent form (step) for this variant");
  CHECK(attn->new_state() == nullptr);

  AttentionConfig cfg;
  cfg.causal = true;
  CHECK_THROWS_WITH(make_attention("efficient", cfg),
                    "attention 'efficient': does not take a causal mask (every key enters the shared context, and no "
                    "(query, key) logit is ever formed); it takes: non-causal, key padding, cross-attention");
  AttentionConfig opt;
  opt.options.set("features", "8");
  CHECK_THROWS_WITH(make_attention("efficient", opt), "attention 'efficient': unknown option 'features'");
}
