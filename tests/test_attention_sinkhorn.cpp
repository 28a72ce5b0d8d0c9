// The `sinkhorn` variant (models/attention/sinkhorn.h): one block against full softmax attention, the variant
// against Sinkhorn and block attention by loops (plain, causal, padded, SortCut, N not a multiple of the block),
// the balanced matrix, causal leakage, finite-difference gradients of q, k, v and the sorting network, errors.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "models/attention/sinkhorn.h"
#include "ops/attention_naive.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::check_parameter_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

using Mat = std::vector<std::vector<double>>;

std::unique_ptr<SinkhornAttention> make_sinkhorn(const std::map<std::string, std::string>& opts, int64_t max_len = 16,
                                                 uint64_t seed = 3) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 3, cfg.max_len = max_len, cfg.seed = seed;
  cfg.options = AttentionOptions(opts);
  std::unique_ptr<Attention> a = make_attention("sinkhorn", cfg);
  auto* s = dynamic_cast<SinkhornAttention*>(a.get());
  REQUIRE(s != nullptr);
  a.release();
  return std::unique_ptr<SinkhornAttention>(s);
}

// P of one (b, h) by loops: block sums of the real keys (of the blocks before, when causal), R = X'W / τ, then
// `iters` row and column normalisations in log space; causal entries exist for j < i only and the column step
// of row i runs over the rows i' with j < i' <= i.
Mat naive_p(const SinkhornAttention& a, const Tensor& k, int64_t b, int64_t h, int64_t len, bool causal) {
  const int64_t N = k.size(2), D = k.size(3), c = a.block(N), nb = (N + c - 1) / c;
  Mat sums(size_t(nb), std::vector<double>(size_t(D), 0.0)), x(size_t(nb), std::vector<double>(size_t(nb), 0.0));
  for (int64_t j = 0; j < std::min(N, len); ++j)
    for (int64_t d = 0; d < D; ++d) sums[size_t(j / c)][size_t(d)] += k.at({b, h, j, d});
  auto valid = [&](int64_t i, int64_t j) { return !causal || j < i; };
  for (int64_t i = 0; i < nb; ++i)
    for (int64_t j = 0; j < nb; ++j)
      for (int64_t d = 0; d < D; ++d) {
        double s = 0;
        for (int64_t i2 = 0; i2 < (causal ? i : i + 1); ++i2)
          if (causal || i2 == i) s += sums[size_t(i2)][size_t(d)];
        x[size_t(i)][size_t(j)] += s * a.sort_net().at({h, d, j}) / a.temperature();
      }
  for (int64_t it = 0; it < a.iters(); ++it) {
    for (int64_t i = 0; i < nb; ++i) {
      double z = 0;
      for (int64_t j = 0; j < nb; ++j) z += valid(i, j) ? std::exp(x[size_t(i)][size_t(j)]) : 0.0;
      for (int64_t j = 0; j < nb; ++j) x[size_t(i)][size_t(j)] -= std::log(z);
    }
    const Mat old = x;
    for (int64_t i = 0; i < nb; ++i)
      for (int64_t j = 0; j < nb; ++j) {
        double z = 0;
        for (int64_t i2 = causal ? j + 1 : 0; i2 <= (causal ? i : nb - 1); ++i2) z += std::exp(old[size_t(i2)][size_t(j)]);
        x[size_t(i)][size_t(j)] = old[size_t(i)][size_t(j)] - std::log(z);
      }
  }
  for (int64_t i = 0; i < nb; ++i)
    for (int64_t j = 0; j < nb; ++j) x[size_t(i)][size_t(j)] = valid(i, j) ? std::exp(x[size_t(i)][size_t(j)]) : 0.0;
  return x;
}

// The variant by loops: query p of block i softmaxes over its own block's keys j (j < length, j <= p when causal)
// and the c sorted slots Σ_j P_ij k_{j·c+t} (padded keys read as zero; slot t hidden when t >= length, or when the
// row draws from no block); with SortCut, over the slots of sorted blocks 0..n-1 only.
Tensor naive_sinkhorn(const SinkhornAttention& a, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                      const std::vector<int64_t>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3), Dv = v.size(3);
  const int64_t c = a.block(N), nb = (N + c - 1) / c, n = a.sortcut();
  Tensor out = zeros({B, H, N, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t len = lengths.empty() ? N : lengths[size_t(b)];
      const Mat p = naive_p(a, k, b, h, len, causal);
      auto real = [&](const Tensor& x, int64_t j, int64_t f) { return j < std::min(N, len) ? x.at({b, h, j, f}) : 0.0; };
      auto sorted = [&](const Tensor& x, int64_t i, int64_t t, int64_t f) {
        double s = 0;
        for (int64_t j = 0; j < nb; ++j) s += p[size_t(i)][size_t(j)] * real(x, j * c + t, f);
        return s;
      };
      for (int64_t pos = 0; pos < N; ++pos) {
        const int64_t i = pos / c;
        std::vector<std::vector<double>> keys, vals;
        auto add = [&](bool sorted_slot, int64_t blk, int64_t t) {
          std::vector<double> kk, vv;
          for (int64_t d = 0; d < D; ++d) kk.push_back(sorted_slot ? sorted(k, blk, t, d) : real(k, blk * c + t, d));
          for (int64_t e = 0; e < Dv; ++e) vv.push_back(sorted_slot ? sorted(v, blk, t, e) : real(v, blk * c + t, e));
          keys.push_back(kk), vals.push_back(vv);
        };
        for (int64_t t = 0; t < c; ++t) {
          if (n > 0) {
            for (int64_t s = 0; s < n; ++s)
              if (t < len) add(true, s, t);
            continue;
          }
          const int64_t j = i * c + t;
          if (j < std::min(N, len) && (!causal || j <= pos)) add(false, i, t);
          if (t < len && !(causal && i == 0)) add(true, i, t);
        }
        std::vector<double> e;
        double z = 0;
        for (const auto& kk : keys) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += q.at({b, h, pos, d}) * kk[size_t(d)];
          e.push_back(std::exp(s / std::sqrt(double(D))));
          z += e.back();
        }
        for (int64_t f = 0; f < Dv; ++f) {
          double acc = 0;
          for (size_t t = 0; t < keys.size(); ++t) acc += e[t] / z * vals[t][size_t(f)];
          out.set_at({b, h, pos, f}, keys.empty() ? 0.0 : acc);
        }
      }
    }
  return out;
}

}  // namespace

TEST_CASE("sinkhorn: one block (block >= N) == full softmax attention (each key counted twice), causal, padded") {
  // One block: P = [1], the sorted partner is the block itself, and a key present twice with its value twice
  // leaves every softmax weight unchanged. Causal: block 0 draws from no block, so only the causal own block.
  auto attn = make_sinkhorn({});
  CHECK(attn->name() == "sinkhorn");
  const Tensor q = uniform({2, 2, 7, 3}, 1, -2, 2), k = uniform({2, 2, 7, 3}, 2, -2, 2), v = uniform({2, 2, 7, 4}, 3);
  const double scale = 1 / std::sqrt(3.0);
  for (bool causal : {false, true}) {
    AttentionMask m;
    m.causal = causal;
    m.key_lengths = {4, 7};
    CHECK(max_abs_diff(attn->forward(q, k, v, m), naive_attention(q, k, v, m, scale)) < 1e-12);
    const Tensor y32 = attn->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m);
    CHECK(y32.dtype() == DType::F32);
    CHECK(max_abs_diff(y32, naive_attention(q, k, v, m, scale)) < 1e-5);
  }
  CHECK(max_abs_diff(attn->forward(q, k, v, {}), naive_attention(q, k, v, {}, scale)) < 1e-12);
  CHECK(max_abs_diff(attn->sorting_matrix(k), ones({2, 2, 1, 1}, DType::F64)) == 0);
}

TEST_CASE("sinkhorn == Sinkhorn and block attention by loops: N not a multiple, causal, padded, SortCut, f32") {
  // N = 10 in blocks of 4: nb = 3, the last block padded internally with 2 hidden slots.
  const Tensor q = uniform({2, 2, 10, 3}, 11, -2, 2), k = uniform({2, 2, 10, 3}, 12, -2, 2);
  const Tensor v = uniform({2, 2, 10, 2}, 13);
  auto attn = make_sinkhorn({{"block", "4"}, {"temperature", "0.5"}});
  for (bool causal : {false, true})
    for (bool pad : {false, true}) {
      AttentionMask m;
      m.causal = causal;
      if (pad) m.key_lengths = {6, 3};
      const Tensor ref = naive_sinkhorn(*attn, q, k, v, causal, m.key_lengths);
      CHECK(max_abs_diff(attn->forward(q, k, v, m), ref) < 1e-12);
      CHECK(max_abs_diff(attn->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m), ref) < 1e-5);
    }
  for (const char* n : {"1", "2"}) {
    auto cut = make_sinkhorn({{"block", "4"}, {"sortcut", n}, {"iters", "3"}});
    AttentionMask m;
    m.key_lengths = {10, 2};
    CHECK(max_abs_diff(cut->forward(q, k, v, m), naive_sinkhorn(*cut, q, k, v, false, m.key_lengths)) < 1e-12);
    CHECK(max_abs_diff(cut->forward(q, k, v, {}), naive_sinkhorn(*cut, q, k, v, false, {})) < 1e-12);
  }
  // padded keys and values, even 1e9, are zeroed before summing and mixing: the output does not move
  AttentionMask m;
  m.key_lengths = {6, 3};
  Tensor k2 = k.clone(), v2 = v.clone();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 6; j < 10; ++j) {
      for (int64_t d = 0; d < 3; ++d) k2.set_at({0, h, j, d}, 1e9);
      for (int64_t e = 0; e < 2; ++e) v2.set_at({0, h, j, e}, -1e9);
    }
  CHECK(max_abs_diff(attn->forward(q, k2, v2, m), attn->forward(q, k, v, m)) == 0);
}

TEST_CASE("sinkhorn: P is doubly stochastic after enough iterations; causal P is strictly lower triangular") {
  const Tensor k = uniform({2, 2, 16, 3}, 21, -2, 2);
  auto many = make_sinkhorn({{"block", "4"}, {"iters", "200"}, {"temperature", "1"}});
  const Tensor p = many->sorting_matrix(k);
  CHECK(p.shape() == Shape{2, 2, 4, 4});
  CHECK(max_abs_diff(sum(p, {3}), ones({2, 2, 4}, DType::F64)) < 1e-9);  // rows
  CHECK(max_abs_diff(sum(p, {2}), ones({2, 2, 4}, DType::F64)) < 1e-9);  // columns
  // after the default 5 iterations the columns (the last step) sum to 1 exactly up to rounding
  auto few = make_sinkhorn({{"block", "4"}});
  CHECK(max_abs_diff(sum(few->sorting_matrix(k), {2}), ones({2, 2, 4}, DType::F64)) < 1e-14);
  // Causal balancing draws row i from blocks j < i, and its column step normalises over the rows i' <= i only, so
  // the rows need not sum to 1 (row 1 has one block to draw from, and takes it whole); entries stay in [0, 1].
  AttentionMask causal;
  causal.causal = true;
  const Tensor pc = many->sorting_matrix(k, causal);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h) {
      CHECK(std::abs(pc.at({b, h, 1, 0}) - 1) < 1e-14);
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          if (j >= i) CHECK(pc.at({b, h, i, j}) == 0);
          else CHECK((pc.at({b, h, i, j}) > 0 && pc.at({b, h, i, j}) <= 1 + 1e-14));
        }
    }
}

TEST_CASE("sinkhorn causal: out_i has no gradient from q, k, v at j > i; huge future keys leave it bitwise") {
  auto attn = make_sinkhorn({{"block", "3"}});
  const int64_t N = 11;
  const Tensor q0 = uniform({2, 2, N, 3}, 31, -2, 2), k0 = uniform({2, 2, N, 3}, 32, -2, 2);
  const Tensor v0 = uniform({2, 2, N, 2}, 33);
  AttentionMask m;
  m.causal = true;
  m.key_lengths = {11, 8};
  for (int64_t i = 0; i < N; ++i) {
    Tensor q = q0.clone(), k = k0.clone(), v = v0.clone();
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    const Tensor yi = narrow(attn->forward(q, k, v, m), 2, i, 1);
    yi.backward(uniform(yi.shape(), 34 + uint64_t(i)));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t j = i + 1; j < N; ++j) {
          for (int64_t d = 0; d < 3; ++d) CHECK(q.grad().at({b, h, j, d}) == 0);
          for (int64_t d = 0; d < 3; ++d) CHECK(k.grad().at({b, h, j, d}) == 0);
          for (int64_t e = 0; e < 2; ++e) CHECK(v.grad().at({b, h, j, e}) == 0);
        }
  }
  const Tensor ref = attn->forward(q0, k0, v0, m);
  for (int64_t t = 1; t < N; ++t) {
    Tensor q2 = q0.clone(), k2 = k0.clone(), v2 = v0.clone();
    for (int64_t j = t; j < N; ++j)
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t d = 0; d < 3; ++d) k2.set_at({0, h, j, d}, 50.0 * (d + 1));
        for (int64_t d = 0; d < 3; ++d) q2.set_at({1, h, j, d}, -30.0);
        for (int64_t e = 0; e < 2; ++e) v2.set_at({0, h, j, e}, 1e6);
      }
    CHECK(max_abs_diff(narrow(attn->forward(q2, k2, v2, m), 2, 0, t), narrow(ref, 2, 0, t)) == 0);
  }
}

TEST_CASE("sinkhorn: finite-difference gradients of q, k, v and of the sorting network (f64)") {
  const std::vector<Tensor> qkv{uniform({2, 2, 5, 3}, 41, -2, 2), uniform({2, 2, 5, 3}, 42, -2, 2),
                                uniform({2, 2, 5, 2}, 43)};
  for (const char* sortcut : {"0", "2"})
    for (bool causal : {false, true}) {
      if (causal && sortcut[0] != '0') continue;
      auto attn = make_sinkhorn({{"block", "2"}, {"sortcut", sortcut}, {"temperature", "2"}}, 6);
      Attention* a = attn.get();
      AttentionMask m;
      m.causal = causal;
      m.key_lengths = {5, 4};
      check_gradients([a, m](auto x) { return a->forward(x[0], x[1], x[2], m); }, qkv);
      check_parameter_gradients(attn->named_parameters(), [&] { return a->forward(qkv[0], qkv[1], qkv[2], m); });
    }
  auto attn = make_sinkhorn({{"block", "2"}}, 6);
  CHECK(attn->named_parameters().size() == 1);
  CHECK(attn->named_parameters()[0].first == "sort_net");
  CHECK(attn->sort_net().shape() == Shape{2, 3, 3});  // [H, D, max_len / block]
}

TEST_CASE("sinkhorn: bad options, max_len, refused masks, N > max_len and shapes are errors") {
  auto bad = [](const std::string& key, const std::string& value, int64_t max_len = 8, bool causal = false) {
    AttentionConfig cfg;
    cfg.max_len = max_len, cfg.causal = causal;
    if (!key.empty()) cfg.options.set(key, value);
    return make_attention("sinkhorn", cfg);
  };
  CHECK_THROWS_WITH(bad("block", "0"), "attention 'sinkhorn': option block expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(bad("iters", "0"), "attention 'sinkhorn': option iters expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(bad("sortcut", "-1"), "attention 'sinkhorn': option sortcut expects an integer >= 0, got '-1'");
  CHECK_THROWS_WITH(bad("temperature", "0"), "attention 'sinkhorn': option temperature expects a finite number > 0, "
                                             "got '0'");
  CHECK_THROWS_WITH(bad("", "", 0), "attention 'sinkhorn': needs AttentionConfig::max_len >= 1 (the sorting network "
                                    "has one output per block), got 0");
  CHECK_THROWS_WITH(bad("sortcut", "1", 8, true),
                    "attention 'sinkhorn': does not take a causal mask (sorted keys are mixtures of positions, query "
                    "block i is paired with key block i of one sequence, and SortCut reads the first sorted blocks, "
                    "drawn from all of it); it takes: non-causal, key padding");
  CHECK_THROWS_WITH(bad("sortcut", "2", 8), "attention 'sinkhorn': option sortcut = 2 exceeds the 1 blocks of max_len 8");
  CHECK_THROWS_WITH(bad("buckets", "2"), "attention 'sinkhorn': unknown option 'buckets'");

  auto attn = make_sinkhorn({{"block", "2"}}, 6);
  const Tensor q = uniform({1, 2, 4, 3}, 51), v = uniform({1, 2, 4, 2}, 52);
  const std::string why = " (sorted keys are mixtures of positions, and query block i is paired with key block i of "
                          "one sequence); it takes: causal, non-causal, key padding";
  AttentionMask keep;
  keep.keep = ones({4, 4});
  CHECK_THROWS_WITH(attn->forward(q, q, v, keep), ("attention 'sinkhorn': does not take a keep mask" + why).c_str());
  AttentionMask bias;
  bias.bias = zeros({4, 4}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, q, v, bias), ("attention 'sinkhorn': does not take a bias" + why).c_str());
  AttentionMask alibi;
  alibi.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, q, v, alibi), ("attention 'sinkhorn': does not take ALiBi slopes" + why).c_str());
  AttentionMask offset;
  offset.causal = true, offset.query_offset = 1;
  CHECK_THROWS_WITH(attn->forward(q, q, v, offset), ("attention 'sinkhorn': does not take causal queries that continue "
                                                     "a sequence (query_offset 1, 4 queries, 4 keys; step() continues "
                                                     "one)" + why).c_str());
  const Tensor q8 = uniform({1, 2, 8, 3}, 53), v8 = uniform({1, 2, 8, 2}, 54);
  CHECK_THROWS_WITH(attn->forward(q8, q8, v8, {}), "attention 'sinkhorn': q [1, 2, 8, 3] has 8 positions, more than "
                                                   "max_len 6 that the sorting network was built for");
  CHECK_THROWS_WITH(attn->forward(narrow(q, 2, 0, 3), q, v, {}),
                    ("attention 'sinkhorn': does not take cross-attention (3 queries, 4 keys)" + why).c_str());
  const Tensor q4 = uniform({1, 2, 4, 4}, 55);
  CHECK_THROWS_WITH(attn->forward(q4, q4, v, {}), "attention 'sinkhorn': q [1, 2, 4, 4] needs 2 heads of dim 3 (the "
                                                 "sorting network is [2, 3, nb])");
  auto cut = make_sinkhorn({{"block", "2"}, {"sortcut", "3"}}, 6);
  CHECK_THROWS_WITH(cut->forward(q, q, v, {}), "attention 'sinkhorn': sortcut = 3 exceeds the 2 blocks of q "
                                               "[1, 2, 4, 3] (block 2)");
  AttentionMask causal;
  causal.causal = true;
  CHECK_THROWS_WITH(cut->forward(q, q, v, causal),
                    "attention 'sinkhorn': does not take a causal mask (sorted keys are mixtures of positions, query "
                    "block i is paired with key block i of one sequence, and SortCut reads the first sorted blocks, "
                    "drawn from all of it); it takes: non-causal, key padding");
  CHECK_THROWS_WITH(attn->step(q, q, v, *std::make_unique<AttentionState>(), {}),
                    "attention 'sinkhorn': no recurrent form (step) for this variant");
  CHECK(attn->new_state() == nullptr);
}
