// The `nystrom` variant (models/attention/nystrom.h): landmarks = n gives softmax attention within a stated bound,
// a plain-loop reference of F̃ Z B̃ V with the same iterative Z, finite-difference gradients, the conv skip against
// a loop, key padding, and errors.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "models/attention/nystrom.h"
#include "ops/attention_naive.h"
#include "ops/binary.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::check_parameter_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

using Mat = std::vector<std::vector<double>>;

std::unique_ptr<Attention> make_nystrom(int64_t landmarks, int64_t iters = 6, int64_t conv = 0) {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 3, cfg.seed = 5;
  cfg.options.set("landmarks", std::to_string(landmarks));
  cfg.options.set("iters", std::to_string(iters));
  if (conv > 0) cfg.options.set("conv", std::to_string(conv));
  return make_attention("nystrom", cfg);
}

Mat matmul(const Mat& a, const Mat& b) {
  Mat c(a.size(), std::vector<double>(b[0].size(), 0.0));
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t k = 0; k < b.size(); ++k)
      for (size_t j = 0; j < b[0].size(); ++j) c[i][j] += a[i][k] * b[k][j];
  return c;
}

// c·I − a for square a
Mat shift(double c, const Mat& a) {
  Mat r = a;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a.size(); ++j) r[i][j] = (i == j ? c : 0.0) - a[i][j];
  return r;
}

// Row-wise softmax of x yᵀ / √D.
Mat softmax_logits(const Mat& x, const Mat& y) {
  Mat p(x.size(), std::vector<double>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    double mx = -1e300, z = 0;
    for (size_t j = 0; j < y.size(); ++j) {
      double s = 0;
      for (size_t d = 0; d < x[i].size(); ++d) s += x[i][d] * y[j][d];
      p[i][j] = s / std::sqrt(double(x[i].size()));
      mx = std::max(mx, p[i][j]);
    }
    for (double& e : p[i]) z += (e = std::exp(e - mx));
    for (double& e : p[i]) e /= z;
  }
  return p;
}

// Means of m consecutive segments of the rows of x, the first rows.size() mod m segments one row longer.
Mat landmarks_of(const Mat& x, size_t m) {
  Mat out;
  size_t start = 0;
  for (size_t s = 0; s < m; ++s) {
    const size_t size = x.size() / m + (s < x.size() % m ? 1 : 0);
    std::vector<double> mean(x[0].size(), 0.0);
    for (size_t j = start; j < start + size; ++j)
      for (size_t d = 0; d < mean.size(); ++d) mean[d] += x[j][d] / double(size);
    out.push_back(mean);
    start += size;
  }
  return out;
}

// Z_0 = aᵀ / (max column sum · max row sum), then iters steps of Z ← ¼ Z (13I − aZ (15I − aZ (7I − aZ))).
Mat iterative_pinv(const Mat& a, int64_t iters) {
  const size_t m = a.size();
  double col = 0, row = 0;
  for (size_t i = 0; i < m; ++i) {
    double c = 0, r = 0;
    for (size_t j = 0; j < m; ++j) c += std::abs(a[j][i]), r += std::abs(a[i][j]);
    col = std::max(col, c), row = std::max(row, r);
  }
  Mat z(m, std::vector<double>(m));
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < m; ++j) z[i][j] = a[j][i] / (col * row);
  for (int64_t it = 0; it < iters; ++it) {
    const Mat az = matmul(a, z);
    z = matmul(z, shift(13, matmul(az, shift(15, matmul(az, shift(7, az))))));
    for (auto& r : z)
      for (double& e : r) e *= 0.25;
  }
  return z;
}

Mat rows_of(const Tensor& t, int64_t b, int64_t h, int64_t len) {
  Mat m(size_t(len), std::vector<double>(size_t(t.size(3))));
  for (int64_t i = 0; i < len; ++i)
    for (int64_t d = 0; d < t.size(3); ++d) m[size_t(i)][size_t(d)] = t.at({b, h, i, d});
  return m;
}

// F̃ Z B̃ V by plain loops in double, batch element b on its first lengths[b] keys, m clamped to min(m, Lq, n_b).
// `residual`, if given, receives the largest ‖I − Ã Z‖∞ (row-sum norm) over batch elements and heads.
Tensor naive_nystrom(const Tensor& q, const Tensor& k, const Tensor& v, int64_t landmarks, int64_t iters,
                     const std::vector<int64_t>& lengths, double* residual = nullptr) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Dv = v.size(3);
  Tensor out = zeros({B, H, Lq, Dv}, DType::F64);
  if (residual) *residual = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t n = lengths.empty() ? k.size(2) : lengths[size_t(b)];
      if (n == 0) continue;
      const size_t m = size_t(std::min({landmarks, Lq, n}));
      const Mat qs = rows_of(q, b, h, Lq), ks = rows_of(k, b, h, n), vs = rows_of(v, b, h, n);
      const Mat ql = landmarks_of(qs, m), kl = landmarks_of(ks, m);
      const Mat a = softmax_logits(ql, kl), z = iterative_pinv(a, iters);
      const Mat o = matmul(softmax_logits(qs, kl), matmul(z, matmul(softmax_logits(ql, ks), vs)));
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t d = 0; d < Dv; ++d) out.set_at({b, h, i, d}, o[size_t(i)][size_t(d)]);
      if (residual) {
        const Mat r = shift(1, matmul(a, z));
        for (const auto& row : r) {
          double s = 0;
          for (double e : row) s += std::abs(e);
          *residual = std::max(*residual, s);
        }
      }
    }
  return out;
}

}  // namespace

TEST_CASE("nystrom with landmarks = n and converged iterations is softmax attention within ‖I − ÃZ‖∞ max|v|") {
  // With m = n every landmark is one position, so F̃ = Ã = B̃ = A = softmax(q kᵀ/√D) and the output is A Z A v.
  // A Z A v − A v = (A Z − I) A v, and A v has rows that are convex mixtures of the values, so every element of the
  // error is at most ‖I − A Z‖∞ · max|v|: the bound checked below, plus 1e-13 for rounding.
  const Tensor q = uniform({2, 2, 6, 3}, 1, -3, 3), k = uniform({2, 2, 6, 3}, 2, -3, 3), v = uniform({2, 2, 6, 4}, 3);
  auto attn = make_nystrom(6, 40);
  double residual = 0;
  const Tensor want = naive_nystrom(q, k, v, 6, 40, {}, &residual);
  CHECK(residual < 1e-12);  // Z has converged: the bound below is then a few ulps
  const Tensor exact = naive_attention(q, k, v, {}, 1.0 / std::sqrt(3.0));
  CHECK(max_abs_diff(attn->forward(q, k, v, {}), exact) <= residual * 1.0 + 1e-13);
  CHECK(max_abs_diff(want, exact) <= residual * 1.0 + 1e-13);
  // landmarks > n is clamped to n: the same result
  CHECK(max_abs_diff(make_nystrom(50, 40)->forward(q, k, v, {}), attn->forward(q, k, v, {})) == 0);
}

TEST_CASE("nystrom == a plain-loop reference with the same iterative Z (uneven segments, cross-attention, f32)") {
  const Tensor q = uniform({2, 2, 5, 3}, 4, -2, 2), k = uniform({2, 2, 7, 3}, 5, -2, 2), v = uniform({2, 2, 7, 2}, 6);
  for (int64_t iters : {0, 1, 6}) {
    CAPTURE(iters);
    auto attn = make_nystrom(3, iters);  // 7 keys: segments of 3, 2, 2; 5 queries: 2, 2, 1
    CHECK(attn->name() == "nystrom");
    CHECK(max_abs_diff(attn->forward(q, k, v, {}), naive_nystrom(q, k, v, 3, iters, {})) < 1e-12);
  }
  auto attn = make_nystrom(3);
  const Tensor y32 = attn->forward(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), {});
  CHECK(y32.dtype() == DType::F32);
  CHECK(max_abs_diff(y32, naive_nystrom(q, k, v, 3, 6, {})) < 1e-4);
  // self-attention, n = 16 not a multiple of m = 5 (segments 4, 3, 3, 3, 3)
  const Tensor x = uniform({1, 2, 16, 3}, 7, -2, 2), w = uniform({1, 2, 16, 2}, 8);
  CHECK(max_abs_diff(make_nystrom(5)->forward(x, x, w, {}), naive_nystrom(x, x, w, 5, 6, {})) < 1e-12);
}

TEST_CASE("nystrom: key padding computes each batch element on its real keys; 1e9 in padding changes nothing") {
  const Tensor q = uniform({3, 2, 7, 3}, 9, -2, 2), k = uniform({3, 2, 7, 3}, 10, -2, 2), v = uniform({3, 2, 7, 2}, 11);
  auto attn = make_nystrom(3);
  AttentionMask m;
  m.key_lengths = {5, 2, 0};  // m clamped to 2 for the second element; the third has no key: zeros
  const Tensor y = attn->forward(q, k, v, m);
  CHECK(max_abs_diff(y, naive_nystrom(q, k, v, 3, 6, m.key_lengths)) < 1e-12);
  for (double x : narrow(y, 0, 2, 1).to_vector()) CHECK(x == 0);
  // element 0 equals the unpadded run on its first 5 keys
  const Tensor cut = attn->forward(narrow(q, 0, 0, 1), narrow(narrow(k, 0, 0, 1), 2, 0, 5).contiguous(),
                                   narrow(narrow(v, 0, 0, 1), 2, 0, 5).contiguous(), {});
  CHECK(max_abs_diff(narrow(y, 0, 0, 1), cut) < 1e-14);

  Tensor k2 = k.clone(), v2 = v.clone();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 5; j < 7; ++j) {
      for (int64_t d = 0; d < 3; ++d) k2.set_at({0, h, j, d}, 1e9);
      for (int64_t d = 0; d < 2; ++d) v2.set_at({0, h, j, d}, -1e9);
    }
  k2.set_requires_grad(true);
  v2.set_requires_grad(true);
  auto conv = make_nystrom(3, 6, 3);
  for (Attention* a : {attn.get(), conv.get()}) {
    const Tensor y2 = a->forward(q, k2, v2, m);
    CHECK(max_abs_diff(y2, a->forward(q, k, v, m)) == 0);
    y2.backward(uniform(y2.shape(), 12));
    for (int64_t j = 5; j < 7; ++j) {
      CHECK(k2.grad().at({0, 1, j, 2}) == 0);
      CHECK(v2.grad().at({0, 0, j, 1}) == 0);
    }
    k2.zero_grad();
    v2.zero_grad();
  }
}

TEST_CASE("nystrom: finite-difference gradients of q, k, v (f64), with and without padding") {
  auto attn = make_nystrom(2);
  Attention* a = attn.get();
  const std::vector<Tensor> qkv{uniform({2, 2, 3, 3}, 13), uniform({2, 2, 5, 3}, 14), uniform({2, 2, 5, 2}, 15)};
  check_gradients([a](auto x) { return a->forward(x[0], x[1], x[2], {}); }, qkv);
  AttentionMask m;
  m.key_lengths = {4, 1};
  check_gradients([a, m](auto x) { return a->forward(x[0], x[1], x[2], m); }, qkv);
}

TEST_CASE("nystrom: finite-difference gradients with the conv skip, of q, k, v and of the kernel (f64)") {
  auto conv = make_nystrom(2, 6, 3);
  conv->to(DType::F64);
  Attention* c = conv.get();
  const std::vector<Tensor> qkv{uniform({1, 2, 4, 3}, 16), uniform({1, 2, 4, 3}, 17), uniform({1, 2, 4, 2}, 18)};
  AttentionMask m;
  m.key_lengths = {3};
  check_gradients([c, m](auto x) { return c->forward(x[0], x[1], x[2], m); }, qkv);
  check_parameter_gradients(conv->named_parameters(), [&] { return c->forward(qkv[0], qkv[1], qkv[2], m); });
}

TEST_CASE("nystrom: the conv skip adds exactly the depth-wise convolution of v (a loop), padding as zeros") {
  auto plain = make_nystrom(2);
  auto conv = make_nystrom(2, 6, 3);
  conv->to(DType::F64);
  auto* ny = dynamic_cast<NystromAttention*>(conv.get());
  REQUIRE(ny != nullptr);
  const Tensor w = ny->conv_weight();
  REQUIRE(w.shape() == Shape{2, 3});
  for (double x : w.to_vector()) CHECK(std::abs(x) < 1 / std::sqrt(3.0));
  const Tensor q = uniform({2, 2, 6, 3}, 19), k = uniform({2, 2, 6, 3}, 20), v = uniform({2, 2, 6, 2}, 21);
  AttentionMask m;
  m.key_lengths = {6, 4};
  const Tensor diff = conv->forward(q, k, v, m) - plain->forward(q, k, v, m);
  Tensor want = zeros({2, 2, 6, 2}, DType::F64);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 6; ++i)
        for (int64_t d = 0; d < 2; ++d) {
          double acc = 0;
          for (int64_t t = 0; t < 3; ++t) {
            const int64_t j = i + t - 1;
            if (j >= 0 && j < m.key_lengths[size_t(b)]) acc += w.at({h, t}) * v.at({b, h, j, d});
          }
          want.set_at({b, h, i, d}, acc);
        }
  CHECK(max_abs_diff(diff, want) < 1e-14);
}

TEST_CASE("nystrom: causal, bad options, conv with Lq != n and per-pair masks are refused with clear errors") {
  AttentionConfig cfg;
  cfg.heads = 2, cfg.head_dim = 3;
  AttentionConfig causal = cfg;
  causal.causal = true;
  CHECK_THROWS_WITH(make_attention("nystrom", causal),
                    "attention 'nystrom': does not take a causal mask (every landmark mixes future positions, and it "
                    "forms no (query, key) logits); it takes: non-causal, key padding, cross-attention");
  auto with = [&](const char* key, const char* value) {
    AttentionConfig c = cfg;
    c.options.set(key, value);
    return c;
  };
  CHECK_THROWS_WITH(make_attention("nystrom", with("landmarks", "0")),
                    "attention 'nystrom': option landmarks expects an integer >= 1, got '0'");
  CHECK_THROWS_WITH(make_attention("nystrom", with("iters", "-1")),
                    "attention 'nystrom': option iters expects an integer >= 0, got '-1'");
  CHECK_THROWS_WITH(make_attention("nystrom", with("conv", "4")),
                    "attention 'nystrom': option conv must be 0 (off) or an odd kernel width, got 4");
  CHECK_THROWS_WITH(make_attention("nystrom", with("share", "kv")), "attention 'nystrom': unknown option 'share'");
  CHECK(make_attention("nystrom", cfg)->named_parameters().empty());

  const Tensor q = uniform({1, 2, 4, 3}, 22), k = uniform({1, 2, 4, 3}, 23), v = uniform({1, 2, 4, 3}, 24);
  auto conv = make_nystrom(2, 6, 3);
  CHECK_THROWS_WITH(conv->forward(q, uniform({1, 2, 5, 3}, 25), uniform({1, 2, 5, 3}, 26), {}),
                    "attention 'nystrom': does not take cross-attention (4 queries, 5 keys) (every landmark mixes "
                    "future positions, it forms no (query, key) logits, and its conv skip adds value i to query i); "
                    "it takes: non-causal, key padding");
  const Tensor q3 = uniform({1, 3, 4, 3}, 27);
  CHECK_THROWS_WITH(conv->forward(q3, q3, q3, {}),
                    "attention 'nystrom': the conv skip (conv = 3) needs 2 heads, got q [1, 3, 4, 3]");
  auto attn = make_nystrom(2);
  const std::string why = " (every landmark mixes future positions, and it forms no (query, key) logits); it takes: "
                          "non-causal, key padding, cross-attention";
  AttentionMask cm;
  cm.causal = true;
  CHECK_THROWS_WITH(attn->forward(q, k, v, cm), ("attention 'nystrom': does not take a causal mask" + why).c_str());
  AttentionMask keep;
  keep.keep = ones({4, 4});
  CHECK_THROWS_WITH(attn->forward(q, k, v, keep), ("attention 'nystrom': does not take a keep mask" + why).c_str());
  AttentionMask bias;
  bias.bias = zeros({4, 4}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, k, v, bias), ("attention 'nystrom': does not take a bias" + why).c_str());
  AttentionMask alibi;
  alibi.alibi_slopes = from_vector(std::vector<double>{0.5, 0.25}, {2}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(q, k, v, alibi), ("attention 'nystrom': does not take ALiBi slopes" + why).c_str());
  AttentionMask lengths;
  lengths.key_lengths = {5};
  CHECK_THROWS_WITH(attn->forward(q, k, v, lengths), "attention 'nystrom': key_lengths[0] = 5 is outside [0, 4]");
  CHECK_THROWS_WITH(nystrom_pinv(zeros({2, 3}, DType::F64), 1),
                    "nystrom_pinv: needs square matrices [..., m, m], got [2, 3]");
  CHECK(attn->new_state() == nullptr);
}
