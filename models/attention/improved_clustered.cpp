#include "models/attention/improved_clustered.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "models/attention/clustered.h"
#include "models/attention/exact_topk.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
#include "ops/view.h"

namespace eng {

namespace {

int64_t key_length(const AttentionMask& mask, int64_t b, int64_t Lk) {
  return mask.key_lengths.empty() ? Lk : mask.key_lengths[size_t(b)];
}

}  // namespace

ENG_REGISTER_ATTENTION(improved_clustered, "improved-clustered",
                       "improved clustered attention (Vyas et al. 2020): clustered attention plus each query's exact "
                       "softmax on its centroid's top-k keys, O(N*(C + k)), non-causal",
                       [](const AttentionConfig& c) { return std::make_unique<ImprovedClusteredAttention>(c, false); });
ENG_REGISTER_ATTENTION(causal_improved_clustered, "causal-improved-clustered",
                       "causal improved clustered attention (fast-transformers): exact softmax on the centroid's "
                       "top-k among each query's visible keys, O(N*(C + k)), causal or not",
                       [](const AttentionConfig& c) { return std::make_unique<ImprovedClusteredAttention>(c, true); },
                       {{"clusters", "3"}, {"topk", "4"}});  // fewer clusters and keys than the sweep's 16 positions

ImprovedClusteredAttention::ImprovedClusteredAttention(const AttentionConfig& config, bool causal_form)
    : QueryClusteredAttention(config, causal_form ? "causal-improved-clustered" : "improved-clustered"),
      causal_form_(causal_form),
      causal_(config.causal),
      topk_(config.options.get_int("topk", 32, IntRange::at_least(1))) {
  accepts_.causal = accepts_.query_offset = causal_form;
  accepts_.cross = true;
  accepts_.grouped_step = causal_form;
  accepts_.why_not = causal_form ? "a centroid stands for queries at many positions, so per-query masks cannot apply"
                                 : "a centroid stands for queries at many positions; causal-improved-clustered is the "
                                   "causal form";
}

Tensor ImprovedClusteredAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionMask& mask) {
  const int64_t kk = std::min(topk_, k.size(2));
  if (causal_form_ && mask.causal) {
    const int64_t call_index = forward_call();
    if (q.size(2) == 0 || kk == 0) return zeros({q.size(0), q.size(1), q.size(2), v.size(3)}, q.dtype());
    return prefix_causal(q, k, v, mask, call_index, kk);
  }
  const std::vector<int64_t> ids = forward_clusters(q);
  if (q.size(2) == 0 || kk == 0) return zeros({q.size(0), q.size(1), q.size(2), v.size(3)}, q.dtype());
  return causal_form_ ? causal(q, k, v, mask, ids, kk) : improved(q, k, v, mask, ids, kk);
}

// Row t's keys (improved_clustered.h): the K-means over the codes of queries 0 … t, the mean of the queries of t's
// cluster, and its top kk of the keys j < end by centroid logit (top_keys' order and tie rule).
void ImprovedClusteredAttention::prefix_top_keys(const std::vector<uint64_t>& codes, const RowReader& query,
                                                 const RowReader& key, int64_t D, int64_t end, int64_t kk,
                                                 int64_t* out) const {
  const int64_t t = int64_t(codes.size()) - 1;
  const std::vector<int64_t> ids = hamming_kmeans(codes, num_clusters(), iterations(), bits());
  std::vector<double> row(static_cast<size_t>(D)), centroid(row.size(), 0.0), lc(static_cast<size_t>(end));
  int64_t members = 0;
  for (int64_t i = 0; i <= t; ++i) {  // Eq. 3 for t's cluster, over the prefix
    if (ids[size_t(i)] != ids[size_t(t)]) continue;
    query(i, row.data());
    for (int64_t d = 0; d < D; ++d) centroid[size_t(d)] += row[size_t(d)];
    ++members;
  }
  for (double& x : centroid) x /= double(members);
  for (int64_t j = 0; j < end; ++j) {  // the centroid's logits: only their ranking is used
    key(j, row.data());
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += centroid[size_t(d)] * row[size_t(d)];
    lc[size_t(j)] = dot;
  }
  top_keys(lc.data(), end, kk, out);
}

Tensor ImprovedClusteredAttention::prefix_causal(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const AttentionMask& mask, int64_t call_index, int64_t kk) const {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3), Lk = k.size(2);
  const std::vector<uint64_t> code = codes(q, call_index);
  const std::vector<double> qv = q.to_vector(), kv = k.to_vector();
  std::vector<int64_t> keys(size_t(B * H * N * kk), -1);
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const RowReader query = [&](int64_t i, double* x) {
      const double* row = qv.data() + (bh * N + i) * D;
      std::copy(row, row + D, x);
    };
    const RowReader key = [&](int64_t j, double* x) {
      const double* row = kv.data() + (bh * Lk + j) * D;
      std::copy(row, row + D, x);
    };
    for (int64_t i = 0; i < N; ++i) {
      const std::vector<uint64_t> prefix(code.begin() + bh * N, code.begin() + bh * N + i + 1);
      prefix_top_keys(prefix, query, key, D, attention_key_end(mask, bh / H, i, Lk), kk,
                      &keys[size_t((bh * N + i) * kk)]);
    }
  }
  const KeyListAttention lists = gather_key_lists(q, k, v, keys, kk);
  return apply_key_lists(softmax(lists.logits, -1), lists);  // a row without keys: zeros
}

Tensor ImprovedClusteredAttention::improved(const Tensor& q, const Tensor& k, const Tensor& v,
                                            const AttentionMask& mask, const std::vector<int64_t>& ids,
                                            int64_t kk) const {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), Lk = k.size(2), C = std::min(num_clusters(), N);
  const Tensor logits = centroid_logits(cluster_centroids(q, ids, C), k, mask);  // [B, H, C, Lk]
  const Tensor ac = softmax(logits, -1);                                         // Eq. 4
  // T_j of every cluster (among the non-padded keys), as key lists and as a 0/1 membership [B, H, C, Lk]
  const std::vector<double> lc = logits.to_vector();
  std::vector<int64_t> top(size_t(B * H * C * kk)), keys(size_t(B * H * N * kk));
  std::vector<double> in_top(size_t(B * H * C * Lk), 0.0), rest(in_top.size(), 1.0);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t row = bh * C + c;
      top_keys(&lc[size_t(row * Lk)], key_length(mask, bh / H, Lk), kk, &top[size_t(row * kk)]);
      for (int64_t s = 0; s < kk; ++s) {
        const int64_t j = top[size_t(row * kk + s)];
        if (j < 0) continue;
        in_top[size_t(row * Lk + j)] = 1;
        rest[size_t(row * Lk + j)] = 0;
      }
    }
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < N; ++i) {
      const auto from = top.begin() + (bh * C + ids[size_t(bh * N + i)]) * kk;
      std::copy(from, from + kk, keys.begin() + (bh * N + i) * kk);
    }
  const Tensor mass = sum(mul(ac, from_vector(in_top, {B, H, C, Lk}, q.dtype())), {3}, true);  // m̂_j
  const Tensor others = matmul(mul(ac, from_vector(rest, {B, H, C, Lk}, q.dtype())), v);       // A^c off T_j
  const KeyListAttention lists = gather_key_lists(q, k, v, keys, kk);
  const Tensor weights = mul(softmax(lists.logits, -1), reshape(broadcast_clusters(mass, ids, N), {B, H, N, 1, 1}));
  return add(apply_key_lists(weights, lists), broadcast_clusters(others, ids, N));  // Eq. 8–9
}

Tensor ImprovedClusteredAttention::causal(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionMask& mask, const std::vector<int64_t>& ids,
                                          int64_t kk) const {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), Lk = k.size(2), C = std::min(num_clusters(), N);
  // Only the ranking of the centroid logits is used: computed without a graph.
  const std::vector<double> lc = centroid_logits(cluster_centroids(q.detach(), ids, C), k.detach(), mask).to_vector();
  std::vector<int64_t> keys(size_t(B * H * N * kk), -1);
  std::vector<std::vector<int64_t>> order(static_cast<size_t>(C));
  std::vector<char> sorted(static_cast<size_t>(C));
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t len = key_length(mask, bh / H, Lk);
    std::fill(sorted.begin(), sorted.end(), 0);
    for (int64_t i = 0; i < N; ++i) {
      const int64_t c = ids[size_t(bh * N + i)];
      if (!sorted[size_t(c)]) {  // the cluster's keys by decreasing centroid logit, once per cluster
        order[size_t(c)].assign(size_t(len), -1);
        top_keys(&lc[size_t((bh * C + c) * Lk)], len, len, order[size_t(c)].data());
        sorted[size_t(c)] = 1;
      }
      const int64_t end = attention_key_end(mask, bh / H, i, Lk);
      int64_t* out = &keys[size_t((bh * N + i) * kk)];
      int64_t n = 0;
      for (size_t r = 0; r < order[size_t(c)].size() && n < kk; ++r)
        if (order[size_t(c)][r] < end) out[n++] = order[size_t(c)][r];
    }
  }
  const KeyListAttention lists = gather_key_lists(q, k, v, keys, kk);
  return apply_key_lists(softmax(lists.logits, -1), lists);
}

std::unique_ptr<AttentionState> ImprovedClusteredAttention::new_state() const {
  return causal_form_ && causal_ ? std::make_unique<ClusteredState>() : nullptr;
}

// Row t of the causal form (improved_clustered.h), from the cached codes, queries and keys.
Tensor ImprovedClusteredAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v,
                                               AttentionState& state, const AttentionMask&) {
  auto* s = dynamic_cast<ClusteredState*>(&state);
  const std::string who = "attention '" + variant_ + "' step";
  ENG_CHECK(s, who, ": the state was not made by this variant's new_state()");
  const int64_t t = s->length, B = q.size(0), H = q.size(1), D = q.size(3), G = k.size(1), Dv = v.size(3);
  const int64_t kk = std::min(topk_, t + 1);
  check_step_length(who, t, s->queries.stored());
  const std::vector<uint64_t> code = codes(q, call());
  Tensor code_rows = empty({B, H, 1, 1}, DType::I64);
  for (int64_t bh = 0; bh < B * H; ++bh) code_rows.data<int64_t>()[bh] = int64_t(code[size_t(bh)]);
  s->queries.append(q, who);
  s->codes.append(code_rows, who);
  s->keys.append(k, who);
  s->values.append(v, who);

  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<uint64_t> prefix(size_t(t + 1));
  std::vector<double> row(static_cast<size_t>(D)), qt(row.size()), logits(static_cast<size_t>(kk)),
      values(size_t(kk * Dv)), out(size_t(B * H * Dv));
  std::vector<int64_t> top(static_cast<size_t>(kk));
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t bg = bh / H * G + bh % H / (H / G);
    for (int64_t i = 0; i <= t; ++i) prefix[size_t(i)] = uint64_t(s->codes.ids(bh, i)[0]);
    prefix_top_keys(prefix, [&](int64_t i, double* x) { s->queries.read(bh, i, x); },
                    [&](int64_t j, double* x) { s->keys.read(bg, j, x); }, D, t + 1, kk, top.data());
    s->queries.read(bh, t, qt.data());
    for (int64_t n = 0; n < kk; ++n) {
      s->keys.read(bg, top[size_t(n)], row.data());
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += qt[size_t(d)] * row[size_t(d)];
      logits[size_t(n)] = dot * scale;
      s->values.read(bg, top[size_t(n)], &values[size_t(n * Dv)]);
    }
    softmax_row(logits, values, Dv, &out[size_t(bh * Dv)]);
  }
  return from_vector(out, {B, H, 1, Dv}, q.dtype());
}

}  // namespace eng
