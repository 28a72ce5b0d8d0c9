#include "models/attention/query_clustering.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/error.h"
#include "engine/rng.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/matmul.h"
#include "ops/select.h"
#include "ops/view.h"

namespace eng {

namespace {

// The variants' own Philox key, so that the planes never reuse the words of the model's generator Rng(seed), which
// initialises the weights; draw d starts at word d·2^32 of it.
constexpr uint64_t kStream = 0x636c7573'74657265ull;  // "clustere"
constexpr int kDrawShift = 32;


}  // namespace

int hamming_distance(uint64_t a, uint64_t b) { return __builtin_popcountll(a ^ b); }

std::vector<int64_t> hamming_assign(const std::vector<uint64_t>& codes, const std::vector<uint64_t>& centroids) {
  std::vector<int64_t> ids(codes.size(), 0);
  for (size_t i = 0; i < codes.size(); ++i) {
    int best = 65;
    for (size_t c = 0; c < centroids.size(); ++c) {
      const int d = hamming_distance(codes[i], centroids[c]);
      if (d < best) {  // strict: the lower index keeps a tie
        best = d;
        ids[i] = int64_t(c);
      }
    }
  }
  return ids;
}

std::vector<uint64_t> hamming_centroids(const std::vector<uint64_t>& codes, const std::vector<int64_t>& ids,
                                        const std::vector<uint64_t>& previous, int bits) {
  const size_t C = previous.size();
  // votes[c·bits + b] = (#members with bit b set) − (#members without it)
  std::vector<int64_t> votes(C * size_t(bits), 0), members(C, 0);
  for (size_t i = 0; i < codes.size(); ++i) {
    const size_t c = size_t(ids[i]);
    ++members[c];
    for (int b = 0; b < bits; ++b) votes[c * size_t(bits) + size_t(b)] += (codes[i] >> b & 1) ? 1 : -1;
  }
  std::vector<uint64_t> out(previous);
  for (size_t c = 0; c < C; ++c) {
    if (members[c] == 0) continue;
    uint64_t x = 0;
    for (int b = 0; b < bits; ++b) x |= uint64_t(votes[c * size_t(bits) + size_t(b)] > 0) << b;
    out[c] = x;
  }
  return out;
}

std::vector<int64_t> hamming_kmeans(const std::vector<uint64_t>& codes, int64_t clusters, int64_t iterations,
                                    int bits) {
  const int64_t C = std::min<int64_t>(clusters, int64_t(codes.size()));
  std::vector<uint64_t> centroids(codes.begin(), codes.begin() + C);
  std::vector<int64_t> ids = hamming_assign(codes, centroids);
  for (int64_t it = 1; it < iterations; ++it) {
    centroids = hamming_centroids(codes, ids, centroids, bits);
    ids = hamming_assign(codes, centroids);
  }
  return ids;
}

Tensor cluster_centroids(const Tensor& q, const std::vector<int64_t>& ids, int64_t C) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2);
  std::vector<double> count(size_t(B * H * C), 0.0), s(size_t(B * H * C * N), 0.0);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < N; ++i) count[size_t(bh * C + ids[size_t(bh * N + i)])] += 1;
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < N; ++i) {
      const int64_t c = ids[size_t(bh * N + i)];
      s[size_t((bh * C + c) * N + i)] = 1.0 / count[size_t(bh * C + c)];
    }
  return matmul(from_vector(s, {B, H, C, N}, q.dtype()), q);
}

Tensor centroid_logits(const Tensor& centroids, const Tensor& k, const AttentionMask& mask) {
  const int64_t Lk = k.size(2);
  const Tensor logits =
      mul_scalar(matmul(centroids, transpose(k, 2, 3)), 1.0 / std::sqrt(double(k.size(3))));
  if (mask.key_lengths.empty()) return logits;
  return masked_fill(logits, padded_keys(mask.key_lengths, Lk, false), -std::numeric_limits<double>::infinity());
}

Tensor broadcast_clusters(const Tensor& x, const std::vector<int64_t>& ids, int64_t N) {
  const int64_t B = x.size(0), H = x.size(1), C = x.size(2), F = x.size(3);
  std::vector<double> idx(ids.size());
  for (size_t r = 0; r < ids.size(); ++r) idx[r] = double((int64_t(r) / N) * C + ids[r]);
  const Tensor rows = index_select(reshape(x, {B * H * C, F}), 0, from_vector(idx, {int64_t(idx.size())}, DType::I64));
  return reshape(rows, {B, H, N, F});
}

QueryClusteredAttention::QueryClusteredAttention(const AttentionConfig& config, const std::string& variant)
    : variant_(variant),
      clusters_(config.options.get_int("clusters", 100, IntRange::at_least(1))),
      iterations_(config.options.get_int("iterations", 10, IntRange::at_least(1))),
      bits_(int(config.options.get_int("bits", 32, IntRange{1, 64}))),  // one 64-bit code per query
      hash_bias_(config.options.get_bool("hash_bias", true)),
      seed_(config.seed) {
  const std::string redraw = config.options.get_string("redraw", "every-call");
  ENG_CHECK(redraw == "every-call" || redraw == "fixed", "attention '", variant,
            "': option redraw must be every-call or fixed, got '", redraw, "'");
  fixed_ = redraw == "fixed";
  calls_ = register_buffer("hash_calls", zeros({1}, DType::I64));
}

void QueryClusteredAttention::set_call(int64_t call) {
  ENG_CHECK(call >= 0, "attention '", variant_, "': set_call needs a call index >= 0, got ", call);
  calls_.data<int64_t>()[0] = call;
}

Tensor QueryClusteredAttention::planes(int64_t call, int64_t head_dim) const {
  const int64_t words = 2 * bits_ * (head_dim + 1);  // every normal takes two words
  ENG_CHECK(call >= 0 && call < (int64_t(1) << kDrawShift), "attention '", variant_, "' planes: call index ", call,
            " is outside [0, 2^32)");
  ENG_CHECK(head_dim >= 1 && words < (int64_t(1) << kDrawShift), "attention '", variant_, "' planes: ", bits_,
            " planes of dimension ", head_dim, " need more random words than one draw holds");
  const uint64_t draw = fixed_ ? 0 : uint64_t(call);
  Rng rng(seed_ ^ kStream, draw << kDrawShift);
  std::vector<double> a(size_t(bits_ * (head_dim + 1)));
  for (double& x : a) x = rng.normal();
  if (!hash_bias_)
    for (int64_t b = 0; b < bits_; ++b) a[size_t(b * (head_dim + 1) + head_dim)] = 0;
  return from_vector(a, {bits_, head_dim + 1}, DType::F64);
}

std::vector<uint64_t> QueryClusteredAttention::codes(const Tensor& q, int64_t call) const {
  ENG_CHECK(q.dim() == 4, "attention '", variant_, "' codes: q must be [B, H, N, D], got ", q.shape());
  const int64_t rows = q.size(0) * q.size(1) * q.size(2), D = q.size(3);
  const std::vector<double> a = planes(call, D).to_vector(), x = q.to_vector();
  std::vector<uint64_t> out(static_cast<size_t>(rows), 0);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t b = 0; b < bits_; ++b) {
      const double* ab = &a[size_t(b * (D + 1))];
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += x[size_t(n * D + d)] * ab[d];
      out[size_t(n)] |= uint64_t(s > ab[D]) << b;
    }
  return out;
}

std::vector<int64_t> QueryClusteredAttention::cluster_ids(const Tensor& q, int64_t call) const {
  const std::vector<uint64_t> all = codes(q, call);
  const int64_t N = q.size(2), rows = q.size(0) * q.size(1);
  std::vector<int64_t> ids(all.size());
  for (int64_t r = 0; r < rows; ++r) {  // every (batch element, head) is clustered on its own
    const std::vector<uint64_t> row(all.begin() + r * N, all.begin() + (r + 1) * N);
    const std::vector<int64_t> id = hamming_kmeans(row, clusters_, iterations_, bits_);
    std::copy(id.begin(), id.end(), ids.begin() + r * N);
  }
  return ids;
}

Tensor QueryClusteredAttention::clusters(const Tensor& q, int64_t call) const {
  const std::vector<int64_t> ids = cluster_ids(q, call);
  return from_vector(std::vector<double>(ids.begin(), ids.end()), {q.size(0), q.size(1), q.size(2)}, DType::I64);
}

int64_t QueryClusteredAttention::forward_call() {
  const int64_t call_index = call();
  if (training()) calls_.data<int64_t>()[0] = call_index + 1;
  return call_index;
}

std::vector<int64_t> QueryClusteredAttention::forward_clusters(const Tensor& q) {
  return cluster_ids(q, forward_call());
}

}  // namespace eng
