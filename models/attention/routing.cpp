#include "models/attention/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "engine/error.h"
#include "engine/rng.h"
#include "engine/threadpool.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/key_list_attention.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/softmax.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(routing, "routing",
                       "Routing Transformer attention (Roy et al. 2020): online k-means centroids, each takes its top-w "
                       "queries and keys, O(N*w), causal or not",
                       [](const AttentionConfig& c) { return std::make_unique<RoutingAttention>(c); },
                       {{"clusters", "2"}, {"window", "3"}});  // 16 positions: ~8 keys per cluster, lists of 3

namespace {

// The variant's own Philox key, so that the centroids never reuse the words of the model's generator Rng(seed).
constexpr uint64_t kStream = 0x726f7574'696e6721ull;  // "routing!"

// shared_qk: a query's logit on its own key (q̂_i·q̂_i = D / √D, the largest there is) is replaced by this finite
// value, so that a position attends to itself only when it sees nothing else (Reformer's rule, §2 "Shared-QK").
constexpr double kSelfLogit = -1e5;

std::vector<double> as_doubles(const std::vector<int64_t>& v) { return std::vector<double>(v.begin(), v.end()); }

// μ_c · x for the D values at x; a NaN score ranks last, so that the sort below keeps a strict weak order.
double score(const double* mu, const double* x, int64_t D) {
  double s = 0;
  for (int64_t d = 0; d < D; ++d) s += mu[d] * x[d];
  return std::isnan(s) ? -std::numeric_limits<double>::infinity() : s;
}

// The w positions of the highest scores (ties: lower position first), returned in increasing position order.
void top_w(const std::vector<double>& s, int64_t w, std::vector<int64_t>& perm, int64_t* out) {
  std::iota(perm.begin(), perm.end(), int64_t(0));
  std::partial_sort(perm.begin(), perm.begin() + w, perm.end(), [&s](int64_t a, int64_t b) {
    return s[size_t(a)] > s[size_t(b)] || (s[size_t(a)] == s[size_t(b)] && a < b);
  });
  std::sort(perm.begin(), perm.begin() + w);
  std::copy(perm.begin(), perm.begin() + w, out);
}

// The nearest of the C centroids at mu (largest μ_c · x, the first on ties): the route of one query or key.
int64_t nearest(const double* mu, int64_t C, const double* x, int64_t D) {
  int64_t best = 0;
  double top = score(mu, x, D);
  for (int64_t c = 1; c < C; ++c) {
    const double s = score(mu + c * D, x, D);
    if (s > top) top = s, best = c;
  }
  return best;
}

// Key j of batch element b counts as real (for ranking and for the centroid update) when j < its key length.
int64_t real_length(const AttentionMask& mask, int64_t b, int64_t N) {
  return mask.key_lengths.empty() ? N : mask.key_lengths[size_t(b)];
}

}  // namespace

RoutingAttention::RoutingAttention(const AttentionConfig& config)
    : heads_(config.heads),
      head_dim_(config.head_dim),
      clusters_(config.options.get_int("clusters", 8, IntRange::at_least(1))),
      window_(config.options.get_int("window", 0, IntRange::at_least(0))),  // 0: ceil(N / clusters)
      decay_(config.options.get_double("decay", 0.999, RealRange::below(0, 1))),
      shared_qk_(config.options.get_bool("shared_qk", false)),
      causal_(config.causal) {
  ENG_CHECK(heads_ >= 1 && head_dim_ >= 1, "attention 'routing': needs heads >= 1 and head_dim >= 1 (the centroids "
            "are [heads, clusters, head_dim]), got ", heads_, " and ", head_dim_);
  accepts_.grouped_step = true;
  accepts_.why_not = "queries and keys of one sequence are routed in pairs of sets, and logits exist only inside them";
  Rng rng(config.seed ^ kStream);
  centroids_ = register_buffer("centroids", randn({heads_, clusters_, head_dim_}, rng, DType::F64));
}

int64_t RoutingAttention::window(int64_t n) const {
  const int64_t w = window_ > 0 ? window_ : (n + clusters_ - 1) / clusters_;
  return std::min(w, n);
}

RoutingAttention::Routes RoutingAttention::routes(const Tensor& q, const Tensor& k, const AttentionMask& mask) const {
  ENG_CHECK(q.dim() == 4 && k.dim() == 4 && q.shape() == k.shape(), "attention 'routing' routes: q and k must be "
            "[B, H, N, D] of one shape, got q ", q.shape(), " and k ", k.shape());
  return route_normalised(layer_norm(q.detach(), Tensor(), Tensor()), layer_norm(k.detach(), Tensor(), Tensor()), mask);
}

RoutingAttention::Routes RoutingAttention::route_normalised(const Tensor& q, const Tensor& k,
                                                           const AttentionMask& mask) const {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3), C = clusters_, w = window(N);
  ENG_CHECK(H == heads_ && D == head_dim_, "attention 'routing': q ", q.shape(), " needs ", heads_, " heads of dim ",
            head_dim_, " (the centroids are [", heads_, ", ", C, ", ", head_dim_, "])");
  const std::vector<double> x = q.to_vector(), y = k.to_vector(), mu = centroids_.to_vector();
  std::vector<int64_t> qs(size_t(B * H * C * w)), ks(qs.size());
  const double inf = std::numeric_limits<double>::infinity();
  // Every (b, h, c) picks its own two sets: independent tasks, each with its own scratch.
  parallel_for(0, B * H * C, 1, [&](int64_t lo, int64_t hi) {
    std::vector<int64_t> perm(static_cast<size_t>(N));
    std::vector<double> sq(static_cast<size_t>(N)), sk(static_cast<size_t>(N));
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (H * C), h = task / C % H, c = task % C, len = real_length(mask, b, N);
      const double* m = &mu[size_t((h * C + c) * D)];
      for (int64_t i = 0; i < N; ++i) {
        const size_t row = size_t(((b * H + h) * N + i) * D);
        sq[size_t(i)] = score(m, &x[row], D);
        sk[size_t(i)] = i < len ? score(m, &y[row], D) : -inf;  // padded keys fill a set only when nothing else can
      }
      const size_t at = size_t(task * w);
      top_w(sq, w, perm, &qs[at]);
      top_w(sk, w, perm, &ks[at]);
    }
  });
  return {from_vector(as_doubles(qs), {B, H, C, w}, DType::I64), from_vector(as_doubles(ks), {B, H, C, w}, DType::I64)};
}

void RoutingAttention::update_centroids(const Tensor& qn, const Tensor& kn, const AttentionMask& mask) {
  const int64_t B = qn.size(0), H = qn.size(1), N = qn.size(2), D = qn.size(3), C = clusters_;
  const std::vector<double> x = qn.to_vector(), y = kn.to_vector();
  double* mu = centroids_.data<double>();
  std::vector<double> sums(size_t(C * D)), counts(static_cast<size_t>(C));
  for (int64_t h = 0; h < H; ++h) {
    std::fill(sums.begin(), sums.end(), 0.0);
    std::fill(counts.begin(), counts.end(), 0.0);
    auto assign = [&](const double* row) {
      const int64_t best = nearest(&mu[size_t(h * C * D)], C, row, D);
      for (int64_t d = 0; d < D; ++d) sums[size_t(best * D + d)] += row[d];
      counts[size_t(best)] += 1;
    };
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < real_length(mask, b, N); ++i) {
        const size_t row = size_t(((b * H + h) * N + i) * D);
        assign(&x[row]);
        assign(&y[row]);
      }
    for (int64_t c = 0; c < C; ++c) {
      if (counts[size_t(c)] == 0) continue;  // no vector routed to it: it keeps its place
      for (int64_t d = 0; d < D; ++d) {
        double& m = mu[size_t((h * C + c) * D + d)];
        m = decay_ * m + (1 - decay_) * sums[size_t(c * D + d)] / counts[size_t(c)];
      }
    }
  }
}

Tensor RoutingAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3), Dv = v.size(3);
  check_attention_mask(mask, B, H, N, N, q.dtype(), "attention 'routing'");
  ENG_CHECK(H == heads_ && D == head_dim_, "attention 'routing': q ", q.shape(), " needs ", heads_, " heads of dim ",
            head_dim_, " (the centroids are [", heads_, ", ", clusters_, ", ", head_dim_, "])");
  if (N == 0) return mul_scalar(v, 0.0);
  const Tensor qn = layer_norm(q, Tensor(), Tensor()), kn = shared_qk_ ? qn : layer_norm(k, Tensor(), Tensor());
  if (mask.causal) {
    const Tensor out = attend_causal(qn, kn, v, mask);
    if (training()) update_centroids(qn, kn, mask);
    return out;
  }
  const Routes r = route_normalised(qn, kn, mask);
  const int64_t C = clusters_, w = r.queries.size(3), BH = B * H;
  const std::vector<double> qd = r.queries.to_vector(), kd = r.keys.to_vector();

  // The additive term of the routed logits [B, H, C, w, w] (0 or −inf), written straight into a tensor (C·w² can
  // be N^1.5 entries), and the weight each routed output row o_i^(c) enters the mean of query i with: 1/|S_i|, or
  // 0 when the row sees no key. The rows are then added into place: O(C·w·Dv) memory, never N × C.
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor bias = zeros({B, H, C, w, w}, q.dtype());
  std::vector<double> slot_weight(size_t(BH * C * w), 0.0), gidx_q(slot_weight.size()), gidx_k(slot_weight.size());
  std::vector<int64_t> in_sets(size_t(BH * N), 0);
  ENG_DISPATCH(q.dtype(), T, {
    T* bias_data = bias.data<T>();
    for (int64_t bh = 0; bh < BH; ++bh)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t s = 0; s < w; ++s) {
          const size_t set = size_t((bh * C + c) * w), slot = set + size_t(s);
          const int64_t i = int64_t(qd[slot]), end = attention_key_end(mask, bh / H, i, N);
          bool any = false;
          for (int64_t t = 0; t < w; ++t) {
            const int64_t j = int64_t(kd[set + size_t(t)]);
            const bool seen = j < end;
            any = any || seen;
            T& b = bias_data[slot * size_t(w) + size_t(t)];
            if (!seen) b = T(-inf);
            else if (shared_qk_ && j == i) b = T(kSelfLogit);
          }
          gidx_q[slot] = double(bh * N + i);
          gidx_k[slot] = double(bh * N) + kd[slot];
          slot_weight[slot] = any;
          in_sets[size_t(bh * N + i)] += any;
        }
  });
  for (size_t slot = 0; slot < slot_weight.size(); ++slot)
    if (slot_weight[slot] != 0) slot_weight[slot] /= double(in_sets[size_t(gidx_q[slot])]);

  const Tensor iq = from_vector(gidx_q, {BH * C * w}, DType::I64), ik = from_vector(gidx_k, {BH * C * w}, DType::I64);
  auto gather_rows = [&](const Tensor& x, const Tensor& idx) {  // rows of x [B, H, N, F] -> [B, H, C, w, F]
    const int64_t F = x.size(3);
    return reshape(index_select(reshape(x, {BH * N, F}), 0, idx), {B, H, C, w, F});
  };
  const Tensor sq = gather_rows(qn, iq), sk = gather_rows(kn, ik), sv = gather_rows(v, ik);
  const DType dt = q.dtype();
  Tensor logits = mul_scalar(matmul(sq, transpose(sk, -2, -1)), 1.0 / std::sqrt(double(D)));
  const Tensor o = matmul(softmax(add(logits, bias), -1), sv);  // [B, H, C, w, Dv]: o_i^(c); no key: zeros
  const Tensor weighted = mul(reshape(o, {BH * C * w, Dv}), from_vector(slot_weight, {BH * C * w, 1}, dt));
  const Tensor out = reshape(index_add(weighted, 0, iq, BH * N), {B, H, N, Dv});
  if (training()) update_centroids(qn, kn, mask);
  return out;
}

std::vector<int64_t> RoutingAttention::nearest_centroids(const Tensor& x) const {
  const int64_t BH = x.size(0) * x.size(1), N = x.size(2), D = x.size(3), C = clusters_;
  const std::vector<double> xs = x.to_vector(), mu = centroids_.to_vector();
  std::vector<int64_t> out(size_t(BH * N));
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < N; ++i)
      out[size_t(bh * N + i)] = nearest(&mu[size_t(bh % heads_ * C * D)], C, &xs[size_t((bh * N + i) * D)], D);
  return out;
}

RoutingAttention::Routes RoutingAttention::causal_routes_normalised(const Tensor& qn, const Tensor& kn,
                                                                    const AttentionMask& mask) const {
  const int64_t B = qn.size(0), H = qn.size(1), N = qn.size(2), D = qn.size(3);
  ENG_CHECK(H == heads_ && D == head_dim_, "attention 'routing': q ", qn.shape(), " needs ", heads_, " heads of dim ",
            head_dim_, " (the centroids are [", heads_, ", ", clusters_, ", ", head_dim_, "])");
  const std::vector<int64_t> qc = nearest_centroids(qn), kc = nearest_centroids(kn);
  // Keys of query i: walking back from its last visible key, the first w of its cluster (all with w = 0).
  std::vector<std::vector<int64_t>> lists(size_t(B * H * N));
  int64_t kk = 0;
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < N; ++i) {
      std::vector<int64_t>& list = lists[size_t(bh * N + i)];
      const int64_t c = qc[size_t(bh * N + i)];
      const auto full = [&] { return window_ > 0 && int64_t(list.size()) == window_; };
      for (int64_t j = attention_key_end(mask, bh / H, i, N) - 1; j >= 0 && !full(); --j)
        if (kc[size_t(bh * N + j)] == c) list.push_back(j);
      kk = std::max<int64_t>(kk, int64_t(list.size()));
    }
  std::vector<double> keys(size_t(B * H * N * kk), -1.0);
  for (size_t n = 0; n < lists.size(); ++n)
    std::copy(lists[n].begin(), lists[n].end(), keys.begin() + int64_t(n) * kk);
  return {from_vector(std::vector<double>(qc.begin(), qc.end()), {B, H, N}, DType::I64),
          from_vector(keys, {B, H, N, kk}, DType::I64)};
}

RoutingAttention::Routes RoutingAttention::causal_routes(const Tensor& q, const Tensor& k,
                                                         const AttentionMask& mask) const {
  ENG_CHECK(q.dim() == 4 && k.dim() == 4 && q.shape() == k.shape(), "attention 'routing' causal_routes: q and k must "
            "be [B, H, N, D] of one shape, got q ", q.shape(), " and k ", k.shape());
  AttentionMask causal = mask;
  causal.causal = true;
  const Tensor qn = layer_norm(q.detach(), Tensor(), Tensor());
  return causal_routes_normalised(qn, shared_qk_ ? qn : layer_norm(k.detach(), Tensor(), Tensor()), causal);
}

// The causal form (routing.h): each query's list of its cluster's most recent visible keys, one softmax over it.
Tensor RoutingAttention::attend_causal(const Tensor& qn, const Tensor& kn, const Tensor& v,
                                       const AttentionMask& mask) const {
  const int64_t B = qn.size(0), H = qn.size(1), N = qn.size(2), Dv = v.size(3);
  const Routes r = causal_routes_normalised(qn.detach(), kn.detach(), mask);
  auto lists = std::make_shared<KeyLists>();
  lists->kk = r.keys.size(3);
  if (lists->kk == 0) return zeros({B, H, N, Dv}, qn.dtype());
  const std::vector<double> flat = r.keys.to_vector();
  lists->keys.assign(flat.begin(), flat.end());
  if (shared_qk_) {  // −1e5 on each query's own key
    lists->bias.assign(flat.size(), 0.0);
    for (size_t s = 0; s < flat.size(); ++s)
      if (lists->keys[s] == int64_t(s) / lists->kk % N) lists->bias[s] = kSelfLogit;
  }
  return key_list_attention(qn, kn, v, lists, 1.0 / std::sqrt(double(qn.size(3))));  // no key: zeros
}

std::unique_ptr<AttentionState> RoutingAttention::new_state() const {
  return causal_ ? std::make_unique<RoutingState>() : nullptr;
}

// Row t of the causal form (routing.h): t's nearest centroid, then, walking back from t, the first w keys routed to
// it (all with w = 0), one softmax over them.
Tensor RoutingAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                     const AttentionMask&) {
  auto* s = dynamic_cast<RoutingState*>(&state);
  const std::string who = "attention 'routing' step";
  ENG_CHECK(s, who, ": the state was not made by this variant's new_state()");
  const int64_t t = s->length, B = q.size(0), H = q.size(1), D = q.size(3), Dv = v.size(3), C = clusters_;
  const int64_t G = shared_qk_ ? H : k.size(1), Gv = v.size(1);
  check_step_length(who, t, s->values.stored());
  ENG_CHECK(H == heads_ && D == head_dim_, who, ": q ", q.shape(), " needs ", heads_, " heads of dim ", head_dim_,
            " (the centroids are [", heads_, ", ", C, ", ", head_dim_, "])");
  const Tensor qn = layer_norm(q, Tensor(), Tensor()), kn = shared_qk_ ? qn : layer_norm(k, Tensor(), Tensor());
  const std::vector<double> x = qn.to_vector(), y = kn.to_vector(), mu = centroids_.to_vector();
  std::vector<int64_t> route(static_cast<size_t>(B * H));
  std::vector<double> key_route(route.size());
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const double* m = &mu[size_t(bh % H * C * D)];
    route[size_t(bh)] = nearest(m, C, &x[size_t(bh * D)], D);
    key_route[size_t(bh)] = double(nearest(m, C, &y[size_t((bh / H * G + bh % H / (H / G)) * D)], D));
  }
  s->keys.append(kn, who);
  s->values.append(v, who);
  s->key_routes.append(from_vector(key_route, {B, H, 1, 1}, DType::I64), who);

  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> row(static_cast<size_t>(D)), logits, values, out(size_t(B * H * Dv), 0.0);
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t bg = bh / H * G + bh % H / (H / G), bgv = bh / H * Gv + bh % H / (H / Gv);
    logits.clear();
    values.clear();
    for (int64_t j = t; j >= 0 && (window_ == 0 || int64_t(logits.size()) < window_); --j) {
      if (s->key_routes.ids(bh, j)[0] != route[size_t(bh)]) continue;
      s->keys.read(bg, j, row.data());
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += x[size_t(bh * D + d)] * row[size_t(d)];
      logits.push_back(dot * scale + (shared_qk_ && j == t ? kSelfLogit : 0.0));
      values.resize(values.size() + size_t(Dv));
      s->values.read(bgv, j, &values[values.size() - size_t(Dv)]);
    }
    softmax_row(logits, values, Dv, &out[size_t(bh * Dv)]);
  }
  return from_vector(out, {B, H, 1, Dv}, q.dtype());
}

}  // namespace eng
