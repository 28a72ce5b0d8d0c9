// `bp-transformer` with nodes=pooled: T tokens in, T rows out, the span nodes pooled inside the attention.
// Checked against the definition written out here: the node keys and values as explicit means of their spans,
// then naive softmax attention over [tokens; nodes] under the dense mask of the graph's edges; gradients by finite
// differences (through the pooled means); and a 2-layer language model generated with step() against its parallel
// forward, past several spans of the top level, with 4, 2 and 1 K/V heads.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/rng.h"
#include "models/attention/attention.h"
#include "models/transformer.h"
#include "ops/binary.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

std::unique_ptr<Attention> pooled(int64_t heads, int64_t window, bool causal, int64_t block = 4) {
  AttentionConfig c;
  c.heads = heads;
  c.head_dim = 3;
  c.causal = causal;
  c.options.set("nodes", "pooled");
  c.options.set("window", std::to_string(window));
  c.options.set("block", std::to_string(block));
  return make_attention("bp-transformer", c);
}

struct Key {
  int64_t level, index;  // level 0: token `index`; level l >= 1: node (l, index)
};

// out [B, H, T, Dv] by the definition: node (l, m) = mean of its span's tokens, one softmax over the tokens and the
// nodes the rule admits, in plain loops.
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, int64_t K, bool causal) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Dv = v.size(3);
  const std::vector<double> qq = q.to_vector(), kk = k.to_vector(), vv = v.to_vector();
  std::vector<Key> keys;
  for (int64_t j = 0; j < T; ++j) keys.push_back({0, j});
  for (int64_t l = 1; ((T - 1) >> (l - 1)) >= 1; ++l)  // levels until one node spans every token
    for (int64_t m = 0; m * (int64_t(1) << l) < T; ++m) keys.push_back({l, m});
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      auto row = [&](int64_t j, int64_t x, const std::vector<double>& a, int64_t W) {
        return &a[size_t(((b * H + h) * T + j) * W + x)];
      };
      // The key or value of one entry of `keys`: a token's own, or its span's mean.
      auto pooled_at = [&](const Key& n, int64_t x, const std::vector<double>& a, int64_t W) {
        const int64_t lo = n.index << n.level, hi = std::min((n.index + 1) << n.level, T);
        double s = 0;
        for (int64_t j = lo; j < hi; ++j) s += *row(j, x, a, W);
        return s / double(hi - lo);
      };
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> logit, weight;
        std::vector<size_t> used;
        for (size_t n = 0; n < keys.size(); ++n) {
          const int64_t d = (i >> keys[n].level) - keys[n].index;
          const bool ok = keys[n].level == 0 ? (causal ? d >= 0 && d <= K : std::abs(d) <= K)
                                             : (causal ? d >= 1 && d <= K : std::abs(d) >= 1 && std::abs(d) <= K);
          if (!ok) continue;
          double dot = 0;
          for (int64_t x = 0; x < D; ++x) dot += *row(i, x, qq, D) * pooled_at(keys[n], x, kk, D);
          logit.push_back(dot / std::sqrt(double(D)));
          used.push_back(n);
        }
        double top = -1e300, z = 0;
        for (double l : logit) top = std::max(top, l);
        for (double l : logit) z += std::exp(l - top);
        for (int64_t x = 0; x < Dv; ++x) {
          double s = 0;
          for (size_t u = 0; u < used.size(); ++u)
            s += std::exp(logit[u] - top) / z * pooled_at(keys[used[u]], x, vv, Dv);
          out.push_back(s);
        }
      }
    }
  return out;
}

}  // namespace

TEST_CASE("bp-transformer nodes=pooled == softmax over [tokens; span means] under the graph's dense mask") {
  for (bool causal : {false, true})
    for (int64_t T : {1, 2, 7, 16, 21})
      for (int64_t K : {0, 1, 2, 3}) {
        CAPTURE(causal);
        CAPTURE(T);
        CAPTURE(K);
        auto a = pooled(2, K, causal);
        CHECK(a->positions(T) == T);
        const Tensor q = uniform({2, 2, T, 3}, 1), k = uniform({2, 2, T, 3}, 2), v = uniform({2, 2, T, 2}, 3);
        AttentionMask m;
        m.causal = causal;
        const std::vector<double> got = a->forward(q, k, v, m).to_vector(), want = reference(q, k, v, K, causal);
        REQUIRE(got.size() == want.size());
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
        CHECK(worst < 1e-12);
      }
}

TEST_CASE("bp-transformer nodes=pooled: gradients of q, k and v through the pooled means (finite differences)") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    auto a = pooled(1, 1, causal, 2);
    Attention* p = a.get();
    AttentionMask m;
    m.causal = causal;
    check_gradients([p, m](auto x) { return p->forward(x[0], x[1], x[2], m); },
                    {uniform({1, 1, 7, 3}, 4), uniform({1, 1, 7, 3}, 5), uniform({1, 1, 7, 2}, 6)});
  }
}

namespace {

// The largest difference between a 2-layer model's logits generated with step() and its parallel forward.
double generated_vs_parallel(int64_t kv_heads, int64_t window, int64_t L, DType dtype) {
  TransformerConfig c;
  c.vocab = 7;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = kv_heads;
  c.d_ff = 24;
  c.decoder_layers = 2;
  c.max_len = L;
  c.attention = "bp-transformer";
  c.attention_options.set("nodes", "pooled");
  c.attention_options.set("window", std::to_string(window));
  c.attention_options.set("block", "8");
  LanguageModel model(c);
  model.to(dtype);
  model.eval();
  NoGradGuard no_grad;
  Rng rng(3);
  std::vector<double> ids;
  for (int64_t i = 0; i < 2 * L; ++i) ids.push_back(double(rng.below(7)));
  const Tensor x = from_vector(ids, {2, L}, DType::I64);
  const Tensor full = model.forward(x);
  auto state = model.new_state();
  double worst = 0;
  for (int64_t t = 0; t < L; ++t) {
    const Tensor lt = model.step(squeeze(narrow(x, 1, t, 1), 1), state);
    worst = std::max(worst, max_abs_diff(lt, squeeze(narrow(full, 1, t, 1), 1)));
  }
  return worst;
}

}  // namespace

TEST_CASE("bp-transformer nodes=pooled: a 2-layer model generated with step() equals the parallel forward") {
  // window 2 over 45 tokens: spans of up to 32 tokens, the rings of levels 1 .. 4 wrap several times.
  for (int64_t kv_heads : {4, 2, 1}) {
    CAPTURE(kv_heads);
    CHECK(generated_vs_parallel(kv_heads, 2, 45, DType::F64) < 1e-10);
    CHECK(generated_vs_parallel(kv_heads, 2, 45, DType::F32) < 1e-5);
  }
  CHECK(generated_vs_parallel(2, 1, 37, DType::F32) < 1e-5);
  CHECK(generated_vs_parallel(2, 0, 9, DType::F64) < 1e-10);
}

TEST_CASE("bp-transformer nodes=pooled: the state holds k + 1 tokens, and per level k nodes and one sum") {
  // window 2, batch 1, 2 heads, keys 3 and values 2 wide: the allocator's live bytes after each of 64 steps.
  auto a = pooled(2, 2, true);
  NoGradGuard no_grad;
  const Tensor q = uniform({1, 2, 64, 3}, 7), k = uniform({1, 2, 64, 3}, 8), v = uniform({1, 2, 64, 2}, 9);
  const size_t before = allocator::stats().live_bytes;
  auto state = a->new_state();
  AttentionMask row;
  row.causal = true;
  for (int64_t t = 0; t < 64; ++t) {
    CAPTURE(t);
    row.query_offset = t;
    a->step(narrow(q, 2, t, 1), narrow(k, 2, t, 1), narrow(v, 2, t, 1), *state, row);
    state->length = t + 1;
    // After t + 1 tokens, levels 0 .. L = floor(log2(t + 1)) have a pending sum [2 heads, W] and levels 1 .. L a
    // ring [2 heads, k = 2, W]; plus the ring of k + 1 = 3 tokens; W = 3 for keys, 2 for values; f64 tensors in
    // blocks of whole 64 bytes (engine/allocator.h).
    int64_t L = 0;
    while ((int64_t(2) << L) <= t + 1) ++L;
    auto block = [](int64_t slots) { return (8 * 2 * slots * 3 + 63) / 64 * 64 + (8 * 2 * slots * 2 + 63) / 64 * 64; };
    CHECK(allocator::stats().live_bytes - before == size_t(block(3) + (L + 1) * block(1) + L * block(2)));
  }
}

TEST_CASE("bp-transformer nodes=pooled: what it refuses") {
  auto a = pooled(1, 2, true);
  const Tensor x = zeros({1, 1, 6, 3}, DType::F64);
  AttentionMask m;
  m.causal = true;
  m.key_lengths = {4};
  CHECK_THROWS_WITH(a->forward(x, x, x, m),
                    doctest::Contains("attention 'bp-transformer': does not take key padding (nodes=pooled"));
  CHECK_FALSE(pooled(1, 2, false)->has_step());
  CHECK(pooled(1, 2, true)->has_step());
  AttentionConfig c;
  c.options.set("nodes", "leaves");
  CHECK_THROWS_WITH(make_attention("bp-transformer", c),
                    "attention 'bp-transformer': option nodes expects appended or pooled, got 'leaves'");
}
