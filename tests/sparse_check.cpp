#include "tests/sparse_check.h"

#include <cmath>

#include "engine/allocator.h"
#include "models/attention/sparse_attention.h"
#include "ops/attention_naive.h"
#include "ops/binary.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

namespace eng::test {
namespace {

// Output and the gradients of q, k, v of sum(w * f(q, k, v)) for fixed random weights w.
std::vector<Tensor> run(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f,
                        const std::vector<Tensor>& qkv) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : qkv) leaves.push_back(t.clone().detach().set_requires_grad(true));
  Tensor out = f(leaves[0], leaves[1], leaves[2]);
  out.backward(uniform(out.shape(), 99).to(out.dtype()));
  return {out.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
}

// keep [1, H, Lq, n]: rule(h, offset + i, j).
Tensor dense_keep(int64_t H, int64_t Lq, int64_t n, int64_t offset, const DenseRule& rule) {
  std::vector<double> keep;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = 0; j < n; ++j) keep.push_back(rule(h, offset + i, j) ? 1 : 0);
  return from_vector(keep, {1, H, Lq, n}, DType::F64);
}

void compare(Attention& attn, const SparseCase& c, const DenseRule& rule, const std::vector<Tensor>& qkv,
             const std::vector<int64_t>& lengths, int64_t offset) {
  const int64_t H = c.heads, Lq = qkv[0].size(2), n = c.n;
  AttentionMask m;
  m.causal = c.causal;
  m.key_lengths = lengths;
  m.query_offset = offset;
  auto got = run([&](const Tensor& q, const Tensor& k, const Tensor& v) { return attn.forward(q, k, v, m); }, qkv);
  AttentionMask dense;
  dense.key_lengths = lengths;
  dense.keep = dense_keep(H, Lq, n, offset, rule);
  const double scale = 1.0 / std::sqrt(double(qkv[0].size(3)));
  auto want = run(
      [&](const Tensor& q, const Tensor& k, const Tensor& v) { return naive_attention(q, k, v, dense, scale); }, qkv);
  const char* what[] = {"output", "dq", "dk", "dv"};
  for (size_t t = 0; t < 4; ++t) {
    bool finite = true;
    for (double x : got[t].to_vector()) finite = finite && std::isfinite(x);
    CHECK_MESSAGE(finite, what[t], " has a NaN or inf");
    CHECK_MESSAGE(allclose(got[t], want[t], 1e-10, 1e-12), what[t], " differs by ", max_abs_diff(got[t], want[t]));
  }
  // Rows that see no key (padding) are exact zeros, and so are their query gradients.
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        bool any = false;
        for (int64_t j = 0; j < lengths[b]; ++j) any = any || rule(h, offset + i, j);
        if (any) continue;
        for (int64_t d = 0; d < qkv[2].size(3); ++d) CHECK(got[0].at({int64_t(b), h, i, d}) == 0);
        for (int64_t d = 0; d < qkv[0].size(3); ++d) CHECK(got[1].at({int64_t(b), h, i, d}) == 0);
      }
}

AttentionConfig config_of(const SparseCase& c) {
  AttentionConfig cfg;
  cfg.heads = c.heads;
  cfg.head_dim = 4;
  cfg.causal = c.causal;
  for (const auto& kv : c.options) cfg.options.set(kv.first, kv.second);
  return cfg;
}

}  // namespace

std::unique_ptr<Attention> make_sparse_variant(const SparseCase& c) { return make_attention(c.variant, config_of(c)); }

void check_sparse_pattern(const SparseCase& c, const DenseRule& rule) {
  CAPTURE(c.variant);
  CAPTURE(c.n);
  CAPTURE(c.causal);
  std::string options;
  for (const auto& kv : c.options) options += kv.first + "=" + kv.second + " ";
  CAPTURE(options);
  auto attn = make_sparse_variant(c);
  const int64_t H = c.heads, n = c.n;
  const uint64_t seed = uint64_t(n * 7 + H);
  const std::vector<Tensor> qkv{uniform({2, H, n, 4}, seed, -2, 2), uniform({2, H, n, 4}, seed + 1, -2, 2),
                                uniform({2, H, n, 3}, seed + 2)};
  compare(*attn, c, rule, qkv, {n, n / 3}, 0);
  const int64_t off = n / 3;
  compare(*attn, c, rule, {narrow(qkv[0], 2, off, n - off), qkv[1], qkv[2]}, {}, off);
}

std::vector<int64_t> drawn_blocks(uint64_t seed, int64_t h, int64_t b, int64_t m, int64_t count) {
  Rng rng(seed, (uint64_t(h) << 40) + (uint64_t(b) << 16));
  std::vector<int64_t> s;
  for (int64_t t = m - count < 0 ? 0 : m - count; t < m; ++t) {
    const int64_t x = int64_t(rng.below(uint64_t(t) + 1));
    bool seen = false;
    for (int64_t y : s) seen = seen || y == x;
    s.push_back(seen ? t : x);
  }
  return s;
}

void check_sparse_memory(const SparseCase& c) {
  CAPTURE(c.variant);
  auto attn = make_sparse_variant(c);
  const int64_t H = c.heads, N = c.n;
  std::vector<Tensor> x;
  for (uint64_t s = 1; s <= 3; ++s) {
    Rng rng(s);
    x.push_back(rand({1, H, N, 8}, rng, DType::F32, -1, 1).set_requires_grad(true));
  }
  AttentionMask m;
  m.causal = c.causal;
  allocator::empty_cache();  // fresh blocks: the peak counts what this call needs, not what was cached
  const size_t live = allocator::stats().live_bytes;
  allocator::reset_peak();
  sum(attn->forward(x[0], x[1], x[2], m)).backward();
  const size_t peak = allocator::stats().peak_bytes - live;
  const size_t layout = dynamic_cast<SparseAttention&>(*attn).layout(H, N, N, 0, c.causal)->bytes();
  INFO(c.variant, " at N = ", N, ": peak ", peak, " B, layout ", layout, " B");
  CHECK(peak + layout < size_t(N) * size_t(N) * sizeof(float));
  for (const Tensor& t : x) CHECK(t.grad().defined());
}

}  // namespace eng::test
