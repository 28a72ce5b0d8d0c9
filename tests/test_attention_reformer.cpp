// The `reformer` variant (models/attention/reformer.h): one chunk against full shared-QK attention, several
// buckets, chunks and rounds against a naive reading of the definition on the same bucket ids (causal: each query's
// window of its bucket's most recent positions), the hash against argmax([xR; -xR]), causal leakage,
// finite-difference gradients, replayable hashes, and the errors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "models/attention/reformer.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

constexpr double kSelf = -1e5;  // the own-key logit
constexpr double kEps = 1e-12;  // k = q / sqrt(|q|² + eps)

std::unique_ptr<ReformerAttention> make_reformer(const std::map<std::string, std::string>& opts, uint64_t seed = 7) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 4, cfg.seed = seed;
  cfg.options = AttentionOptions(opts);
  std::unique_ptr<Attention> a = make_attention("reformer", cfg);
  auto* r = dynamic_cast<ReformerAttention*>(a.get());
  REQUIRE(r != nullptr);
  a.release();
  return std::unique_ptr<ReformerAttention>(r);
}

// The normalised keys of one (b, h): k_j = q_j / sqrt(|q_j|² + eps).
std::vector<std::vector<double>> shared_keys(const Tensor& q, int64_t b, int64_t h) {
  const int64_t N = q.size(2), D = q.size(3);
  std::vector<std::vector<double>> k(static_cast<size_t>(N), std::vector<double>(static_cast<size_t>(D)));
  for (int64_t j = 0; j < N; ++j) {
    double n2 = 0;
    for (int64_t d = 0; d < D; ++d) n2 += q.at({b, h, j, d}) * q.at({b, h, j, d});
    for (int64_t d = 0; d < D; ++d) k[size_t(j)][size_t(d)] = q.at({b, h, j, d}) / std::sqrt(n2 + kEps);
  }
  return k;
}

double logit(const Tensor& q, const std::vector<std::vector<double>>& k, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (i == j) return kSelf;
  const int64_t D = q.size(3);
  double s = 0;
  for (int64_t d = 0; d < D; ++d) s += q.at({b, h, i, d}) * k[size_t(j)][size_t(d)];
  return s / std::sqrt(double(D));
}

// Full shared-QK softmax attention by a double loop: every visible key, the own logit replaced by -1e5.
Tensor naive_full(const Tensor& q, const Tensor& v, bool causal, const std::vector<int64_t>& lengths) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), Dv = v.size(3);
  Tensor out = zeros({B, H, N, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const auto k = shared_keys(q, b, h);
      const int64_t len = lengths.empty() ? N : lengths[size_t(b)];
      for (int64_t i = 0; i < N; ++i) {
        std::vector<double> l;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < std::min(len, causal ? i + 1 : N); ++j) {
          l.push_back(logit(q, k, b, h, i, j));
          m = std::max(m, l.back());
        }
        double z = 0;
        for (double x : l) z += std::exp(x - m);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (size_t j = 0; j < l.size(); ++j) acc += std::exp(l[j] - m) / z * v.at({b, h, int64_t(j), e});
          out.set_at({b, h, i, e}, acc);
        }
      }
    }
  return out;
}

// LSH attention by its definition on given bucket ids [R, B, H, N]: in round r position i has rank
// #{j : (bucket_j, j) < (bucket_i, i)} (the stable order), chunk rank / c with c = min(chunk, N); query i sees key j
// when j's chunk is i's or the one before it (cyclically, when there are at least two chunks), j < length. Causal:
// query i sees key j <= i of its own bucket when fewer than w = 2·chunk positions of that bucket lie in (j, i]. Each round's softmax and log-normaliser z_r, then out_i = Σ_r exp(z_r − logsumexp z) o_r; with dedup,
// log(#rounds in which i sees j) is subtracted from every logit but the own one.
Tensor naive_reformer(const Tensor& q, const Tensor& v, const Tensor& buckets, int64_t chunk, bool causal,
                      const std::vector<int64_t>& lengths, bool dedup) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), Dv = v.size(3), R = buckets.size(0);
  const int64_t c = std::min(chunk, N), nc = (N + c - 1) / c;
  const double inf = std::numeric_limits<double>::infinity();
  Tensor out = zeros({B, H, N, Dv}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const auto k = shared_keys(q, b, h);
      const int64_t len = lengths.empty() ? N : lengths[size_t(b)];
      std::vector<std::vector<int64_t>> chunk_of(static_cast<size_t>(R), std::vector<int64_t>(static_cast<size_t>(N)));
      for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < N; ++i) {
          int64_t rank = 0;
          const int64_t bi = int64_t(buckets.at({r, b, h, i}));
          for (int64_t j = 0; j < N; ++j) {
            const int64_t bj = int64_t(buckets.at({r, b, h, j}));
            rank += bj < bi || (bj == bi && j < i);
          }
          chunk_of[size_t(r)][size_t(i)] = rank / c;
        }
      auto sees = [&](int64_t r, int64_t i, int64_t j) {
        const auto bucket = [&](int64_t n) { return buckets.at({r, b, h, n}); };
        if (causal) {
          int64_t between = 0;  // positions of i's bucket in (j, i]
          for (int64_t n = j + 1; n <= i; ++n) between += bucket(n) == bucket(i);
          return j <= i && j < len && bucket(j) == bucket(i) && between < 2 * chunk;
        }
        const int64_t ci = chunk_of[size_t(r)][size_t(i)], cj = chunk_of[size_t(r)][size_t(j)];
        return (cj == ci || (nc > 1 && cj == (ci + nc - 1) % nc)) && j < len;
      };
      for (int64_t i = 0; i < N; ++i) {
        std::vector<double> z(size_t(R), -inf);
        std::vector<std::vector<double>> o(size_t(R), std::vector<double>(size_t(Dv), 0.0));
        for (int64_t r = 0; r < R; ++r) {
          std::vector<std::pair<int64_t, double>> keys;
          for (int64_t j = 0; j < N; ++j) {
            if (!sees(r, i, j)) continue;
            double l = logit(q, k, b, h, i, j);
            if (dedup && j != i) {
              int64_t n = 0;
              for (int64_t r2 = 0; r2 < R; ++r2) n += sees(r2, i, j);
              l -= std::log(double(n));
            }
            keys.push_back({j, l});
          }
          if (keys.empty()) continue;
          double m = -inf, s = 0;
          for (const auto& kv : keys) m = std::max(m, kv.second);
          for (const auto& kv : keys) s += std::exp(kv.second - m);
          z[size_t(r)] = m + std::log(s);
          for (const auto& kv : keys)
            for (int64_t e = 0; e < Dv; ++e)
              o[size_t(r)][size_t(e)] += std::exp(kv.second - z[size_t(r)]) * v.at({b, h, kv.first, e});
        }
        const double zmax = *std::max_element(z.begin(), z.end());
        if (zmax == -inf) continue;  // no visible key in any round: zeros
        double s = 0;  // exp(z_r − logsumexp z) as exp(z_r − max) / s: logsumexp itself rounds at the scale of 1e5
        for (double x : z) s += std::exp(x - zmax);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t r = 0; r < R; ++r) acc += std::exp(z[size_t(r)] - zmax) / s * o[size_t(r)][size_t(e)];
          out.set_at({b, h, i, e}, acc);
        }
      }
    }
  return out;
}

}  // namespace

TEST_CASE("reformer: one chunk == full shared-QK softmax attention with the own-key rule (causal, padding, f32)") {
  // Not causal: one chunk holds every position, so the bucket ids, the rounds and dedup cannot change the result.
  // Causal: a window of 2·chunk >= N holds every earlier position of the bucket, so with every position in one
  // bucket (positions along one direction u, slightly perturbed) it is full causal attention.
  const Tensor q_any = uniform({2, 2, 7, 4}, 1, -2, 2), k = uniform({2, 2, 7, 4}, 2), v = uniform({2, 2, 7, 3}, 3);
  const Tensor u = uniform({4}, 4), noise = uniform({2, 2, 7, 4}, 5, -0.002, 0.002);
  Tensor along = zeros({2, 2, 7, 4}, DType::F64);
  for (int64_t e = 0; e < along.numel(); ++e)
    along.set_at({e / 56, e / 28 % 2, e / 4 % 7, e % 4},
                 (0.5 + 0.3 * double(e / 4 % 7)) * u.at({e % 4}) + noise.at({e / 56, e / 28 % 2, e / 4 % 7, e % 4}));
  for (bool causal : {false, true})
    for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{4, 7}}) {
      const Tensor& q = causal ? along : q_any;
      AttentionMask m;
      m.causal = causal;
      m.key_lengths = lengths;
      const Tensor want = naive_full(q, v, causal, lengths);
      using Opts = std::map<std::string, std::string>;
      for (const Opts& opts : {Opts{{"chunk", "7"}}, Opts{{"chunk", "4"}, {"rounds", "3"}, {"dedup", "true"}},
                               Opts{{"chunk", "64"}, {"buckets", "2"}, {"rounds", "2"}}}) {
        auto attn = make_reformer(opts);
        CHECK(attn->name() == "reformer");
        if (causal) {
          const Tensor bk = attn->buckets(q);  // [R, B, H, N]: one bucket per (round, b, h)
          for (int64_t e = 0; e < bk.numel(); ++e) CHECK(bk.at({e / 28, e / 14 % 2, e / 7 % 2, e % 7}) ==
                                                         bk.at({e / 28, e / 14 % 2, e / 7 % 2, 0}));
        }
        CHECK(max_abs_diff(attn->forward(q, k, v, m), want) < 1e-12);
        const Tensor y32 = attn->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), m);
        CHECK(y32.dtype() == DType::F32);
        CHECK(max_abs_diff(y32, want) < 2e-5);
      }
    }
  // position 0 of a causal sequence sees only itself: out_0 = v_0 (the finite own logit, not -inf)
  AttentionMask causal;
  causal.causal = true;
  const Tensor y = make_reformer({{"chunk", "8"}})->forward(q_any, k, v, causal);
  CHECK(max_abs_diff(narrow(y, 2, 0, 1), narrow(v, 2, 0, 1)) == 0);
}

TEST_CASE("reformer: several buckets, chunks and rounds == the definition on the same bucket ids") {
  struct Case {
    int64_t n, chunk, rounds;
  };
  for (const Case& cs : {Case{11, 4, 3}, Case{8, 4, 2}, Case{9, 2, 2}, Case{10, 3, 1}})
    for (bool causal : {false, true})
      for (bool dedup : {false, true}) {
        const Tensor q = uniform({2, 2, cs.n, 4}, 10 + uint64_t(cs.n), -2, 2), v = uniform({2, 2, cs.n, 3}, 11);
        auto attn = make_reformer({{"buckets", "4"},
                                   {"chunk", std::to_string(cs.chunk)},
                                   {"rounds", std::to_string(cs.rounds)},
                                   {"dedup", dedup ? "true" : "false"}});
        AttentionMask m;
        m.causal = causal;
        m.key_lengths = std::vector<int64_t>{cs.n - 3, cs.n};
        const int64_t call = attn->call();
        const Tensor y = attn->forward(q, q, v, m);
        const Tensor bk = attn->buckets(q, call);
        CHECK(bk.shape() == Shape{cs.rounds, 2, 2, cs.n});
        CHECK(max_abs_diff(y, naive_reformer(q, v, bk, cs.chunk, causal, m.key_lengths, dedup)) < 1e-12);
      }
}

TEST_CASE("reformer: the bucket of x is argmax([xR; -xR]) of the call's rotations; equal buckets keep position order") {
  auto attn = make_reformer({{"buckets", "6"}, {"rounds", "2"}});
  const Tensor q = uniform({2, 2, 9, 4}, 21), R = attn->rotations(3, 4);  // [rounds, D, nb/2]
  CHECK(R.shape() == Shape{2, 4, 3});
  const Tensor bk = attn->buckets(q, 3);
  std::vector<int> used(6, 0);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t n = 0; n < 9; ++n) {
          std::vector<double> cand;  // [xR, -xR]
          for (int64_t s : {1, -1})
            for (int64_t c = 0; c < 3; ++c) {
              double acc = 0;
              for (int64_t d = 0; d < 4; ++d) acc += q.at({b, h, n, d}) * R.at({r, d, c});
              cand.push_back(double(s) * acc);
            }
          const int64_t want = std::max_element(cand.begin(), cand.end()) - cand.begin();
          CHECK(int64_t(bk.at({r, b, h, n})) == want);
          used[size_t(want)] = 1;
        }
  CHECK(std::count(used.begin(), used.begin() + 3, 1) > 0);  // both halves of [xR; -xR] are reached
  CHECK(std::count(used.begin() + 3, used.end(), 1) > 0);
  // rotations are a pure function of (seed, call): another instance with the seed agrees, another seed does not
  CHECK(max_abs_diff(make_reformer({{"buckets", "6"}, {"rounds", "2"}})->rotations(3, 4), R) == 0);
  CHECK(max_abs_diff(make_reformer({{"buckets", "6"}, {"rounds", "2"}}, 8)->rotations(3, 4), R) > 0.1);

  // every position with the direction of u shares one bucket, so the stable sort keeps them in position order and
  // the chunks are runs of consecutive positions: attention to the own and the previous run
  Tensor same = zeros({1, 2, 10, 4}, DType::F64);
  const Tensor u = uniform({4}, 22), v = uniform({1, 2, 10, 3}, 23);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t n = 0; n < 10; ++n)
      for (int64_t d = 0; d < 4; ++d) same.set_at({0, h, n, d}, (0.5 + 0.3 * double(n)) * u.at({d}));
  auto runs = make_reformer({{"chunk", "3"}, {"rounds", "2"}});
  const Tensor sb = runs->buckets(same);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t n = 0; n < 10; ++n) CHECK(sb.at({r, 0, h, n}) == sb.at({r, 0, 0, 0}));
  const Tensor y = runs->forward(same, same, v, {});
  CHECK(max_abs_diff(y, naive_reformer(same, v, zeros({2, 1, 2, 10}, DType::I64), 3, false, {}, false)) < 1e-12);
}

TEST_CASE("reformer causal: no gradient reaches later positions; later q and v (new buckets) leave earlier outputs") {
  const int64_t N = 10;
  const Tensor q0 = uniform({2, 2, N, 4}, 31, -2, 2), v0 = uniform({2, 2, N, 3}, 32);
  AttentionMask m;
  m.causal = true;
  m.key_lengths = std::vector<int64_t>{8, 10};
  for (bool dedup : {false, true}) {
    auto attn = make_reformer({{"buckets", "4"}, {"chunk", "3"}, {"rounds", "2"}, {"dedup", dedup ? "1" : "0"}});
    const int64_t call = attn->call();
    for (int64_t i = 0; i < N; ++i) {
      Tensor q = q0.clone(), v = v0.clone();
      q.set_requires_grad(true);
      v.set_requires_grad(true);
      attn->set_call(call);
      const Tensor yi = narrow(attn->forward(q, q, v, m), 2, i, 1);
      yi.backward(uniform(yi.shape(), 33 + uint64_t(i)));
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t j = i + 1; j < N; ++j) {
            for (int64_t d = 0; d < 4; ++d) CHECK(q.grad().at({b, h, j, d}) == 0);
            for (int64_t e = 0; e < 3; ++e) CHECK(v.grad().at({b, h, j, e}) == 0);
          }
    }
    // Outputs: later values and later queries (new buckets, so the sorted order changes) never move an earlier
    // output: its window counts only the positions up to it.
    attn->set_call(call);
    const Tensor ref = attn->forward(q0, q0, v0, m);
    const Tensor q_new = uniform(q0.shape(), 34, -2, 2);
    for (int64_t t = 1; t < N; ++t) {
      Tensor v2 = v0.clone(), q2 = q0.clone();
      for (int64_t j = t; j < N; ++j)
        for (int64_t h = 0; h < 2; ++h) {
          for (int64_t e = 0; e < 3; ++e) v2.set_at({0, h, j, e}, 1e3 * v0.at({1, h, j, e}));
          for (int64_t d = 0; d < 4; ++d) q2.set_at({1, h, j, d}, q_new.at({1, h, j, d}));
        }
      if (t < N / 2) CHECK(max_abs_diff(attn->buckets(q2, call), attn->buckets(q0, call)) > 0);
      attn->set_call(call);
      const Tensor y = attn->forward(q2, q2, v2, m);
      CHECK(max_abs_diff(narrow(y, 2, 0, t), narrow(ref, 2, 0, t)) < 1e-13);  // a leak moves them by O(1)
    }
  }
}

TEST_CASE("reformer: finite-difference gradient of q and v with fixed rotations (f64), padding and empty rows") {
  const Tensor q = uniform({2, 1, 7, 3}, 41, -2, 2), v = uniform({2, 1, 7, 2}, 42), k = uniform({2, 1, 7, 3}, 43);
  for (bool causal : {false, true})
    for (bool dedup : {false, true}) {
      auto attn = make_reformer({{"buckets", "4"}, {"chunk", "3"}, {"rounds", "2"}, {"redraw", "fixed"},
                                 {"dedup", dedup ? "true" : "false"}});
      AttentionMask m;
      m.causal = causal;
      m.key_lengths = std::vector<int64_t>{causal ? 0 : 5, 7};  // batch element 0 has no key when causal
      Attention* a = attn.get();
      check_gradients([a, m](auto x) { return a->forward(x[0], x[2], x[1], m); }, {q, v}, {}, {k});
    }
  // a fully padded batch element: zero output, no NaN
  auto attn = make_reformer({{"chunk", "3"}, {"rounds", "2"}});
  AttentionMask m;
  m.key_lengths = std::vector<int64_t>{0, 7};
  for (double x : narrow(attn->forward(q, k, v, m), 0, 0, 1).to_vector()) CHECK(x == 0);
}

TEST_CASE("reformer: replayable hashes (set_call, the hash_calls buffer), every-call and fixed redraw; k is ignored") {
  const Tensor q = uniform({2, 2, 12, 4}, 51), v = uniform({2, 2, 12, 3}, 52);
  auto attn = make_reformer({{"buckets", "4"}, {"chunk", "4"}, {"rounds", "2"}});
  CHECK(attn->call() == 0);
  const Tensor y0 = attn->forward(q, q, v, {});
  CHECK(attn->call() == 1);  // a training forward advances the call index
  const Tensor y1 = attn->forward(q, uniform({2, 2, 12, 4}, 53), v, {});
  attn->set_call(0);
  CHECK(max_abs_diff(attn->forward(q, uniform({2, 2, 12, 4}, 54), v, {}), y0) == 0);  // replay, any k
  CHECK(max_abs_diff(attn->forward(q, q, v, {}), y1) == 0);
  CHECK(max_abs_diff(attn->buckets(q, 0), attn->buckets(q, 1)) > 0);  // every-call: new rotations
  // the counter is the buffer a checkpoint saves and loads
  const auto buffers = attn->named_buffers();
  REQUIRE(buffers.size() == 1);
  CHECK(buffers[0].first == "hash_calls");
  buffers[0].second.data<int64_t>()[0] = 1;
  CHECK(attn->call() == 1);
  CHECK(max_abs_diff(attn->forward(q, q, v, {}), y1) == 0);
  // eval mode hashes with call() without advancing it
  attn->eval();
  const Tensor e = attn->forward(q, q, v, {});
  CHECK(attn->call() == 2);
  CHECK(max_abs_diff(attn->forward(q, q, v, {}), e) == 0);

  auto fixed = make_reformer({{"buckets", "4"}, {"chunk", "4"}, {"rounds", "2"}, {"redraw", "fixed"}});
  CHECK(max_abs_diff(fixed->buckets(q, 0), fixed->buckets(q, 9)) == 0);
  const Tensor f0 = fixed->forward(q, q, v, {});
  CHECK(max_abs_diff(fixed->forward(q, q, v, {}), f0) == 0);
  CHECK(fixed->call() == 2);
}

TEST_CASE("reformer: bad options, refused masks, cross-attention shapes and step are errors") {
  auto opt = [](const std::string& key, const std::string& value) {
    AttentionConfig c;
    c.options.set(key, value);
    return c;
  };
  CHECK_THROWS_WITH(make_attention("reformer", opt("buckets", "5")),
                    "attention 'reformer': option buckets must be even (argmax over [xR; -xR] has two buckets per "
                    "column of R), got 5");
  CHECK_THROWS_WITH(make_attention("reformer", opt("buckets", "0")),
                    "attention 'reformer': option buckets expects an integer >= 2, got '0'");
  CHECK_THROWS_WITH(make_attention("reformer", opt("chunk", "0")),
                    "attention 'reformer': option chunk expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(make_attention("reformer", opt("chunk", "-3")),
                    "attention 'reformer': option chunk expects an integer >= 1, got '-3'");
  CHECK_THROWS_WITH(make_attention("reformer", opt("rounds", "0")),
                    "attention 'reformer': option rounds expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(make_attention("reformer", opt("redraw", "always")),
                    "attention 'reformer': option redraw must be every-call or fixed, got 'always'");
  CHECK_THROWS_WITH(make_attention("reformer", opt("features", "8")),
                    "attention 'reformer': unknown option 'features'");

  auto attn = make_reformer({});
  const Tensor q = uniform({1, 2, 4, 3}, 61), v = uniform({1, 2, 4, 3}, 62);
  const std::string why = " (its keys are its own normalised queries, and logits exist only inside "
                          "the sorted chunks); it takes: causal, non-causal, key padding";
  AttentionMask keep;
  keep.keep = ones({4, 4});
  CHECK_THROWS_WITH(attn->forward(q, q, v, keep), ("attention 'reformer': does not take a keep mask" + why).c_str());
  AttentionMask bias;
  bias.bias = zeros({4, 4}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, q, v, bias), ("attention 'reformer': does not take a bias" + why).c_str());
  AttentionMask alibi;
  alibi.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, q, v, alibi), ("attention 'reformer': does not take ALiBi slopes" + why).c_str());
  AttentionMask offset;
  offset.causal = true;
  offset.query_offset = 2;
  CHECK_THROWS_WITH(attn->forward(q, q, v, offset), ("attention 'reformer': does not take causal queries that continue "
                                                     "a sequence (query_offset 2, 4 queries, 4 keys; step() continues "
                                                     "one)" + why).c_str());
  AttentionMask lengths;
  lengths.key_lengths = std::vector<int64_t>{5};
  CHECK_THROWS_WITH(attn->forward(q, q, v, lengths), "attention 'reformer': key_lengths[0] = 5 is outside [0, 4]");
  const Tensor k5 = uniform({1, 2, 5, 3}, 63), v5 = uniform({1, 2, 5, 3}, 64);
  CHECK_THROWS_WITH(attn->forward(q, k5, v5, {}),
                    ("attention 'reformer': does not take cross-attention (4 queries, 5 keys)" + why).c_str());
  CHECK_THROWS_WITH(attn->forward(q, uniform({1, 2, 4, 2}, 65), v, {}),
                    "attention 'reformer': q [1, 2, 4, 3] and k [1, 2, 4, 2] differ in batch, heads or head dim");
  CHECK_THROWS_WITH(attn->set_call(-1), "attention 'reformer': set_call needs a call index >= 0, got -1");
  CHECK(attn->call() == 0);  // refused calls do not advance the counter
  CHECK_THROWS_WITH(attn->step(q, q, v, *std::make_unique<AttentionState>(), {}),
                    "attention 'reformer': no recurrent form (step) for this variant");
  CHECK(attn->new_state() == nullptr);
}
