// The `clustered` variant (models/attention/clustered.h) and the query clustering it shares with improved-clustered
// (models/attention/query_clustering.h): one cluster per query against full softmax attention, a naive reading of
// the definition on the same cluster ids, the hash against its planes, one Lloyd iteration on hand-made codes,
// finite-difference gradients, replayable clusters, and the errors.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "models/attention/clustered.h"
#include "ops/attention_naive.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

using Opts = std::map<std::string, std::string>;

std::unique_ptr<ClusteredAttention> make_clustered(const Opts& opts, uint64_t seed = 5) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 4, cfg.seed = seed;
  cfg.options = AttentionOptions(opts);
  std::unique_ptr<Attention> a = make_attention("clustered", cfg);
  auto* c = dynamic_cast<ClusteredAttention*>(a.get());
  REQUIRE(c != nullptr);
  a.release();
  return std::unique_ptr<ClusteredAttention>(c);
}

// Clustered attention by its definition on given ids [B, H, Lq]: centroid = mean of the cluster's queries, softmax
// of centroid·k_j/√D over the keys j < length, the centroid's output for each of its queries.
Tensor naive_clustered(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& ids,
                       const std::vector<int64_t>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Lk = k.size(2), Dv = v.size(3);
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        std::vector<double> centroid(static_cast<size_t>(D), 0.0);
        double n = 0;
        for (int64_t r = 0; r < Lq; ++r) {
          if (ids.at({b, h, r}) != ids.at({b, h, i})) continue;
          n += 1;
          for (int64_t d = 0; d < D; ++d) centroid[size_t(d)] += q.at({b, h, r, d});
        }
        const int64_t len = lengths.empty() ? Lk : lengths[size_t(b)];
        std::vector<double> w(static_cast<size_t>(len));
        double m = -1e300, z = 0;
        for (int64_t j = 0; j < len; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += centroid[size_t(d)] / n * k.at({b, h, j, d});
          w[size_t(j)] = s / std::sqrt(double(D));
          m = std::max(m, w[size_t(j)]);
        }
        for (double& x : w) z += (x = std::exp(x - m));
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < len; ++j) acc += w[size_t(j)] / z * v.at({b, h, j, e});
          out.set_at({b, h, i, e}, acc);
        }
      }
  return out;
}

}  // namespace

TEST_CASE("clustered: one cluster per query (distinct 64-bit codes) == full softmax attention") {
  // Well-separated queries hashed by 64 planes get distinct codes (checked below). The centroids start as the N
  // codes themselves, so each code is at distance 0 from its own centroid and >= 1 from every other: the identity
  // assignment, a fixed point of the majority update. Each centroid is then its query, and the output is exact.
  const Tensor q = uniform({2, 2, 9, 4}, 1, -3, 3), k = uniform({2, 2, 9, 4}, 2), v = uniform({2, 2, 9, 3}, 3);
  for (const Opts& opts : {Opts{{"bits", "64"}}, Opts{{"bits", "64"}, {"clusters", "9"}, {"iterations", "3"}}}) {
    auto attn = make_clustered(opts);
    CHECK(attn->name() == "clustered");
    const std::vector<uint64_t> codes = attn->codes(q, attn->call());
    for (int64_t row = 0; row < 4; ++row) {
      std::vector<uint64_t> r(codes.begin() + row * 9, codes.begin() + row * 9 + 9);
      std::sort(r.begin(), r.end());
      REQUIRE(std::adjacent_find(r.begin(), r.end()) == r.end());
    }
    const Tensor ids = attn->clusters(q);
    CHECK(ids.shape() == Shape{2, 2, 9});
    for (int64_t i = 0; i < 9; ++i) CHECK(ids.at({1, 1, i}) == double(i));
    for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{5, 0}}) {
      AttentionMask m;
      m.key_lengths = lengths;
      const Tensor want = naive_attention(q, k, v, m, 0.5);
      CHECK(max_abs_diff(attn->forward(q, k, v, m), want) < 1e-12);
    }
  }
}

TEST_CASE("clustered: a few clusters == the definition on the same cluster ids (cross-attention, padding, f32)") {
  const Tensor q = uniform({2, 2, 11, 4}, 11, -2, 2), k = uniform({2, 2, 7, 4}, 12), v = uniform({2, 2, 7, 3}, 13);
  for (const char* clusters : {"1", "3", "5"})
    for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{4, 7}}) {
      auto attn = make_clustered({{"clusters", clusters}, {"bits", "8"}});
      AttentionMask m;
      m.key_lengths = lengths;
      const int64_t call = attn->call();
      const Tensor y = attn->forward(q, k, v, m);
      const Tensor ids = attn->clusters(q, call);
      CHECK(max_abs_diff(y, naive_clustered(q, k, v, ids, lengths)) < 1e-12);
      int64_t used = 0;  // ids lie in [0, C)
      for (double x : ids.to_vector()) used = std::max(used, int64_t(x) + 1);
      CHECK(used <= std::stoll(clusters));
      attn->set_call(call);
      const Tensor y32 = attn->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m);
      CHECK(y32.dtype() == DType::F32);
      if (max_abs_diff(attn->clusters(q.to(DType::F32), call), ids) == 0)  // same ids unless a hash bit flipped
        CHECK(max_abs_diff(y32, y) < 2e-5);
    }
}

TEST_CASE("query clustering: bit b of the code is [q.a_b > beta_b] of the call's planes; hash_bias=false zeroes beta") {
  const Tensor q = uniform({2, 2, 6, 4}, 21, -2, 2);
  for (bool bias : {true, false}) {
    auto attn = make_clustered({{"bits", "20"}, {"hash_bias", bias ? "true" : "false"}});
    const Tensor planes = attn->planes(3, 4);
    CHECK(planes.shape() == Shape{20, 5});
    const std::vector<uint64_t> codes = attn->codes(q, 3);
    int64_t ones = 0;
    for (int64_t r = 0; r < 24; ++r)
      for (int64_t b = 0; b < 20; ++b) {
        double s = 0;
        for (int64_t d = 0; d < 4; ++d) s += q.at({r / 12, r / 6 % 2, r % 6, d}) * planes.at({b, d});
        const bool bit = s > planes.at({b, 4});
        CHECK(bool(codes[size_t(r)] >> b & 1) == bit);
        ones += bit;
      }
    CHECK(ones > 24 * 20 / 5);  // both sides of the planes are reached
    CHECK(ones < 24 * 20 * 4 / 5);
    for (int64_t b = 0; b < 20; ++b)
      if (!bias) CHECK(planes.at({b, 4}) == 0);
  }
  auto attn = make_clustered({});
  CHECK(attn->bits() == 32);
  CHECK(attn->num_clusters() == 100);
  CHECK(attn->iterations() == 10);
  CHECK(attn->hash_bias());
  // planes are a pure function of (seed, call)
  CHECK(max_abs_diff(make_clustered({})->planes(3, 4), attn->planes(3, 4)) == 0);
  CHECK(max_abs_diff(make_clustered({}, 6)->planes(3, 4), attn->planes(3, 4)) > 0.1);
  CHECK(max_abs_diff(attn->planes(4, 4), attn->planes(3, 4)) > 0.1);
  CHECK(max_abs_diff(make_clustered({{"redraw", "fixed"}})->planes(4, 4), attn->planes(0, 4)) == 0);
}

TEST_CASE("query clustering: one Lloyd iteration in Hamming space on hand-made codes") {
  const std::vector<uint64_t> codes{0b0000, 0b0001, 0b1110, 0b1111, 0b0011, 0b1100};
  CHECK(hamming_distance(0b1110, 0b0001) == 4);
  // centroids start as the first C codes, 0000 and 0001; ties (none here) would go to the lower index
  const std::vector<int64_t> first{0, 1, 0, 1, 1, 0};
  CHECK(hamming_assign(codes, {0b0000, 0b0001}) == first);
  CHECK(hamming_kmeans(codes, 2, 1, 4) == first);
  // majority bits: {0000, 1110, 1100} -> 1100 and {0001, 1111, 0011} -> 0011
  const std::vector<uint64_t> updated = hamming_centroids(codes, first, {0b0000, 0b0001}, 4);
  CHECK(updated == std::vector<uint64_t>{0b1100, 0b0011});
  // 0000 and 1111 are at distance 2 from both: the tie goes to centroid 0
  const std::vector<int64_t> second{0, 1, 0, 0, 1, 0};
  CHECK(hamming_assign(codes, updated) == second);
  CHECK(hamming_kmeans(codes, 2, 2, 4) == second);
  // a majority tie gives 0; an empty cluster keeps its centroid; clusters beyond N are capped
  CHECK(hamming_centroids({0b01, 0b10}, {0, 0}, {0b11, 0b10, 0b01}, 2) == std::vector<uint64_t>{0b00, 0b10, 0b01});
  CHECK(hamming_kmeans({0b01, 0b10, 0b01}, 5, 3, 2) == std::vector<int64_t>{0, 1, 0});
}

TEST_CASE("clustered: finite-difference gradient of q, k and v with fixed clusters (f64), padding") {
  const std::vector<Tensor> qkv{uniform({2, 2, 7, 3}, 31, -2, 2), uniform({2, 2, 6, 3}, 32), uniform({2, 2, 6, 2}, 33)};
  for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{4, 0}}) {
    auto attn = make_clustered({{"clusters", "3"}, {"redraw", "fixed"}});
    AttentionMask m;
    m.key_lengths = lengths;
    Attention* a = attn.get();
    check_gradients([a, m](auto x) { return a->forward(x[0], x[1], x[2], m); }, qkv);
  }
}

TEST_CASE("clustered: replay with set_call; every-call redraws, fixed does not; eval does not advance") {
  const Tensor q = uniform({2, 2, 10, 4}, 41, -2, 2), v = uniform({2, 2, 10, 3}, 42);
  auto attn = make_clustered({{"clusters", "3"}, {"bits", "16"}});
  CHECK(attn->call() == 0);
  const Tensor y0 = attn->forward(q, q, v, {});
  CHECK(attn->call() == 1);
  const Tensor y1 = attn->forward(q, q, v, {});
  CHECK(max_abs_diff(y0, y1) > 0);  // another draw of planes, other clusters
  attn->set_call(0);
  CHECK(max_abs_diff(attn->forward(q, q, v, {}), y0) == 0);
  attn->eval();
  const Tensor e = attn->forward(q, q, v, {});
  CHECK(attn->call() == 1);
  CHECK(max_abs_diff(attn->forward(q, q, v, {}), e) == 0);
  const auto buffers = attn->named_buffers();
  REQUIRE(buffers.size() == 1);
  CHECK(buffers[0].first == "hash_calls");
  auto fixed = make_clustered({{"clusters", "3"}, {"bits", "16"}, {"redraw", "fixed"}});
  const Tensor f0 = fixed->forward(q, q, v, {});
  CHECK(max_abs_diff(fixed->forward(q, q, v, {}), f0) == 0);
  CHECK(max_abs_diff(fixed->clusters(q, 7), fixed->clusters(q, 0)) == 0);
}

TEST_CASE("clustered: bad options, causal, keep, bias, ALiBi and bad shapes are refused") {
  auto bad = [](const Opts& opts) {
    AttentionConfig cfg;
    cfg.options = AttentionOptions(opts);
    return make_attention("clustered", cfg);
  };
  CHECK_THROWS_WITH(bad({{"clusters", "0"}}), "attention 'clustered': option clusters expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(bad({{"iterations", "0"}}), "attention 'clustered': option iterations expects an integer >= 1, got "
                                                "'0'");
  CHECK_THROWS_WITH(bad({{"bits", "65"}}),
                    "attention 'clustered': option bits expects an integer in 1..64, got '65'");
  CHECK_THROWS_WITH(bad({{"bits", "0"}}),
                    "attention 'clustered': option bits expects an integer in 1..64, got '0'");
  CHECK_THROWS_WITH(bad({{"redraw", "never"}}),
                    "attention 'clustered': option redraw must be every-call or fixed, got 'never'");
  CHECK_THROWS_WITH(bad({{"topk", "4"}}), "attention 'clustered': unknown option 'topk'");
  CHECK_THROWS_WITH(bad({{"hash_bias", "maybe"}}),
                    "attention 'clustered': option hash_bias expects true or false, got 'maybe'");
  AttentionConfig causal_cfg;
  causal_cfg.causal = true;
  CHECK_THROWS_WITH(make_attention("clustered", causal_cfg),
                    "attention 'clustered': does not take a causal mask (a centroid stands for queries at many "
                    "positions; causal-improved-clustered is the causal form); it takes: non-causal, key padding, "
                    "cross-attention");

  auto attn = make_clustered({});
  const Tensor q = uniform({1, 2, 4, 4}, 51), k = uniform({1, 2, 4, 4}, 52), v = uniform({1, 2, 4, 3}, 53);
  AttentionMask causal;
  causal.causal = true;
  CHECK_THROWS_WITH(attn->forward(q, k, v, causal),
                    "attention 'clustered': does not take a causal mask (a centroid stands for queries at many "
                    "positions; causal-improved-clustered is the causal form); it takes: non-causal, key padding, "
                    "cross-attention");
  const std::string refused = "attention 'clustered': does not take ", why =
      " (a centroid stands for queries at many positions; causal-improved-clustered is the causal form); it takes: "
      "non-causal, key padding, cross-attention";
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
  CHECK_THROWS_WITH(attn->forward(q, k, v, lengths), "attention 'clustered': key_lengths[0] = 5 is outside [0, 4]");
  CHECK_THROWS(attn->forward(q, uniform({1, 2, 4, 3}, 54), v, {}));
  CHECK(attn->call() == 0);  // refused calls do not advance the counter
  CHECK_THROWS_WITH(attn->set_call(-1), "attention 'clustered': set_call needs a call index >= 0, got -1");
  CHECK_THROWS_WITH(attn->step(q, k, v, *std::make_unique<AttentionState>(), {}),
                    "attention 'clustered': no recurrent form (step) for this variant");
  CHECK(attn->new_state() == nullptr);
}
