#include "models/attention/reformer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "engine/error.h"
#include "engine/rng.h"
#include "models/attention/row_cache.h"
#include "ops/binary.h"
#include "ops/lsh_attention.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
#include "ops/unary.h"

namespace eng {

ENG_REGISTER_ATTENTION(reformer, "reformer",
                       "Reformer LSH attention (Kitaev et al. 2020): shared QK, random-rotation hashes, sorted chunks "
                       "with one chunk of look-back, O(N*chunk), causal or not",
                       [](const AttentionConfig& c) { return std::make_unique<ReformerAttention>(c); },
                       {{"buckets", "2"}, {"chunk", "2"}});  // 16 positions: 8 chunks; ~8 per bucket, window 4

namespace {

// The variant's own Philox key, so that the rotations never reuse the words of the model's generator Rng(seed),
// which initialises the weights; draw d starts at word d·2^32 of it.
constexpr uint64_t kStream = 0x7265666f'726d6572ull;  // "reformer"
constexpr int kDrawShift = 32;
// The own-key logit (10^5 in Eq. 9 and trax): finite, so a token with no other visible key attends to itself, and
// far enough below any real logit (|q_i·k_j|/√D ≤ |q_i|/√D) that it gets weight e^-1e5 = 0 otherwise.
constexpr double kSelfLogit = -1e5;
// k = q / sqrt(|q|² + eps): a zero query gets a zero key (and a finite gradient) instead of 0/0; any other key
// moves by a relative 5e-13 at most for |q| >= 1.
constexpr double kNormEps = 1e-12;

std::vector<double> as_doubles(const std::vector<int64_t>& v) { return std::vector<double>(v.begin(), v.end()); }

// The keys of shared-QK attention: k = q / ‖q‖ (Sec. 2), for the parallel form and the step alike.
Tensor shared_keys(const Tensor& q) { return mul(q, rsqrt(add_scalar(sum(mul(q, q), {3}, true), kNormEps))); }

// The rings with `cap` slots each (more than they hold): the held slots copied, the new ones empty. While the rings
// have fewer than w slots none has wrapped, so a ring's n-th position sits in slot n and stays there.
void grow_rings(ReformerState& s, int64_t cap) {
  auto grown = [cap](const Tensor& x, double fill) {
    Shape shape = x.shape();
    shape[3] = cap;
    Tensor y = full(shape, fill, x.dtype());
    y.as_strided(x.shape(), y.strides(), 0).copy_from(x);
    return y;
  };
  s.keys = grown(s.keys, 0);
  s.values = grown(s.values, 0);
  s.positions = grown(s.positions, -1);
}

}  // namespace

ReformerAttention::ReformerAttention(const AttentionConfig& config)
    : nb_(config.options.get_int("buckets", 32, IntRange::at_least(2))),
      rounds_(config.options.get_int("rounds", 1, IntRange::at_least(1))),
      chunk_(config.options.get_int("chunk", 64, IntRange::at_least(1))),
      dedup_(config.options.get_bool("dedup", false)),
      causal_(config.causal),
      seed_(config.seed) {
  const std::string redraw = config.options.get_string("redraw", "every-call");
  ENG_CHECK(redraw == "every-call" || redraw == "fixed",
            "attention 'reformer': option redraw must be every-call or fixed, got '", redraw, "'");
  fixed_ = redraw == "fixed";
  ENG_CHECK(nb_ % 2 == 0, "attention 'reformer': option buckets must be even (argmax over [xR; -xR] has two buckets "
            "per column of R), got ", nb_);
  accepts_.grouped_step = true;  // the keys come from q (H heads); only v has G
  accepts_.why_not = "its keys are its own normalised queries, and logits exist only inside the sorted chunks";
  calls_ = register_buffer("hash_calls", zeros({1}, DType::I64));
}

void ReformerAttention::set_call(int64_t call) {
  ENG_CHECK(call >= 0, "attention 'reformer': set_call needs a call index >= 0, got ", call);
  calls_.data<int64_t>()[0] = call;
}

Tensor ReformerAttention::rotations(int64_t call, int64_t head_dim) const {
  const int64_t half = nb_ / 2, words = 2 * rounds_ * head_dim * half;  // every normal takes two words
  ENG_CHECK(call >= 0 && call < (int64_t(1) << kDrawShift), "attention 'reformer' rotations: call index ", call,
            " is outside [0, 2^32)");
  ENG_CHECK(head_dim >= 1 && words < (int64_t(1) << kDrawShift), "attention 'reformer' rotations: ", rounds_,
            " rounds of ", head_dim, " x ", half, " rotations need more random words than one draw holds");
  const uint64_t draw = fixed_ ? 0 : uint64_t(call);
  Rng rng(seed_ ^ kStream, draw << kDrawShift);
  std::vector<double> r(size_t(rounds_ * head_dim * half));
  for (double& x : r) x = rng.normal();
  return from_vector(r, {rounds_, head_dim, half}, DType::F64);
}

// h(x) = argmax([xR; −xR]) in double, the first maximum on ties; bucket b < nb/2 is column b of xR, b >= nb/2 is
// column b − nb/2 of −xR.
std::vector<int64_t> ReformerAttention::hash(const Tensor& q, int64_t call) const {
  const int64_t rows = q.size(0) * q.size(1) * q.size(2), D = q.size(3), half = nb_ / 2;
  const std::vector<double> rot = rotations(call, D).to_vector(), x = q.to_vector();
  std::vector<int64_t> out(size_t(rounds_ * rows));
  std::vector<double> proj(static_cast<size_t>(half));
  for (int64_t r = 0; r < rounds_; ++r)
    for (int64_t n = 0; n < rows; ++n) {
      for (int64_t c = 0; c < half; ++c) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += x[size_t(n * D + d)] * rot[size_t((r * D + d) * half + c)];
        proj[size_t(c)] = s;
      }
      int64_t best = 0;
      for (int64_t b = 1; b < nb_; ++b) {
        const double cand = b < half ? proj[size_t(b)] : -proj[size_t(b - half)];
        const double top = best < half ? proj[size_t(best)] : -proj[size_t(best - half)];
        if (cand > top) best = b;
      }
      out[size_t(r * rows + n)] = best;
    }
  return out;
}

Tensor ReformerAttention::buckets(const Tensor& q, int64_t call) const {
  ENG_CHECK(q.dim() == 4, "attention 'reformer' buckets: q must be [B, H, N, D], got ", q.shape());
  return from_vector(as_doubles(hash(q, call)), {rounds_, q.size(0), q.size(1), q.size(2)}, DType::I64);
}

// k is not read: the keys are the normalised queries (shared QK); Attention::forward has checked its shape.
Tensor ReformerAttention::attend(const Tensor& q, const Tensor&, const Tensor& v, const AttentionMask& mask) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3);
  check_attention_mask(mask, B, H, N, N, q.dtype(), "attention 'reformer'");
  const int64_t call_index = call();
  if (training()) calls_.data<int64_t>()[0] = call_index + 1;  // counted only once every check has passed
  if (N == 0) return mul_scalar(v, 0.0);
  const std::vector<int64_t> bucket = hash(q, call_index);

  // Geometry: R rounds of nc chunks of c sorted slots; the last chunk is padded with empty slots up to Np = nc·c.
  // Causal: window mode, chunks of the window w so that the own and the previous chunk hold every window.
  const bool causal = mask.causal;
  const int64_t R = rounds_, BH = B * H, c = std::min(causal ? window() : chunk_, N), nc = (N + c - 1) / c;
  const int64_t Np = nc * c;
  auto layout = std::make_shared<LshChunkLayout>();
  LshChunkLayout& L = *layout;
  L.B = B, L.H = H, L.R = R, L.N = N, L.c = c, L.nc = nc;
  L.order.assign(size_t(BH * R * Np), -1);
  L.slot.resize(size_t(BH * R * N));
  std::vector<int64_t> perm(static_cast<size_t>(N));
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t* bk = &bucket[size_t((r * BH + bh) * N)];
      std::iota(perm.begin(), perm.end(), int64_t(0));
      std::stable_sort(perm.begin(), perm.end(), [bk](int64_t a, int64_t b) { return bk[a] < bk[b]; });
      const int64_t base = bh * R + r;
      if (causal) L.bucket.insert(L.bucket.end(), bk, bk + N);
      for (int64_t s = 0; s < N; ++s) {
        L.order[size_t(base * Np + s)] = perm[size_t(s)];
        L.slot[size_t(base * N + perm[size_t(s)])] = s;
      }
    }
  L.key_end.resize(size_t(B * N));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i) L.key_end[size_t(b * N + i)] = attention_key_end(mask, b, i, N);
  L.window = causal ? window() : 0;
  L.dedup = dedup_;
  L.self_logit = kSelfLogit;

  // Each round's o_i^(r) (Eq. 8) and log-normaliser z_r, in original order (ops/lsh_attention.h), then the rounds
  // weighted by exp(z_r − logsumexp_r z_r) (Eq. 7); a query with no visible key in any round has z_r = −inf
  // throughout, gets weights 0 (softmax of an all −inf row) and outputs zeros.
  const auto [ou, zu] = lsh_chunk_attention(q, shared_keys(q), v, layout, 1.0 / std::sqrt(double(D)));
  return sum(mul(softmax(zu, 2), ou), {2});
}

std::unique_ptr<AttentionState> ReformerAttention::new_state() const {
  return causal_ ? std::make_unique<ReformerState>() : nullptr;
}

// Row t of the causal form (reformer.h): t enters, per round, the ring of its bucket, and attends to what that ring
// holds (the bucket's w most recent positions, itself included with self_logit); the rounds are combined by Eq. 7.
Tensor ReformerAttention::attend_step(const Tensor& q, const Tensor&, const Tensor& v, AttentionState& state,
                                      const AttentionMask&) {
  auto* s = dynamic_cast<ReformerState*>(&state);
  const std::string who = "attention 'reformer' step";
  ENG_CHECK(s, who, ": the state was not made by this variant's new_state()");
  const int64_t t = s->length, B = q.size(0), H = q.size(1), D = q.size(3), G = v.size(1), Dv = v.size(3);
  const int64_t R = rounds_, w = window(), rings = R * nb_;
  check_step_length(who, t, s->stored);
  if (t == 0) {
    s->keys = zeros({B, H, rings, 0, D}, q.dtype());
    s->values = zeros({B, H, rings, 0, Dv}, q.dtype());
    s->positions = zeros({B, H, rings, 0}, DType::I64);
    s->counts = zeros({B, H, R, nb_}, DType::I64);
  }
  const int64_t held_before = s->keys.size(3);
  ENG_CHECK(s->keys.shape() == Shape({B, H, rings, held_before, D}) &&
                s->values.shape() == Shape({B, H, rings, held_before, Dv}) && s->keys.dtype() == q.dtype(),
            who, ": q ", q.shape(), " and v ", v.shape(), " (", dtype_name(q.dtype()), ") do not match the state's "
            "rings ", s->keys.shape(), " and ", s->values.shape(), " (", dtype_name(s->keys.dtype()), ")");
  const std::vector<int64_t> bucket = hash(q, call());  // [R, B·H]: t's bucket in every round
  const std::vector<double> qv = q.to_vector(), kv = shared_keys(q).to_vector(), vv = v.to_vector();
  int64_t fullest = 0;  // the most positions a ring will hold after this step
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t r = 0; r < R; ++r)
      fullest = std::max(fullest, s->counts.data<int64_t>()[(bh * R + r) * nb_ + bucket[size_t(r * B * H + bh)]] + 1);
  if (fullest > held_before && held_before < w) grow_rings(*s, std::min(w, std::max<int64_t>(8, 2 * held_before)));
  const int64_t cap = s->keys.size(3);  // slots per ring: w once some bucket has filled its window
  int64_t* counts = s->counts.data<int64_t>();
  int64_t* pos = s->positions.data<int64_t>();
  std::vector<int64_t> ring(size_t(B * H * R)), held(ring.size());  // t's ring per (bh, r) and how full it is
  ENG_DISPATCH(q.dtype(), T, {
    T *K = s->keys.data<T>(), *V = s->values.data<T>();
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t r = 0; r < R; ++r) {
        const int64_t bk = bucket[size_t(r * B * H + bh)], at = (bh * R + r) * nb_ + bk, n = counts[at]++;
        const int64_t slot = at * cap + n % cap, bg = bh / H * G + bh % H / (H / G);  // no wrap while cap < w
        std::copy(&kv[size_t(bh * D)], &kv[size_t(bh * D)] + D, K + slot * D);
        std::copy(&vv[size_t(bg * Dv)], &vv[size_t(bg * Dv)] + Dv, V + slot * Dv);
        pos[slot] = t;
        ring[size_t(bh * R + r)] = at;
        held[size_t(bh * R + r)] = std::min(n + 1, w);
      }
  });
  ++s->stored;

  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> logits, values, o(size_t(R * Dv)), z(static_cast<size_t>(R)),
      out(size_t(B * H * Dv));
  // Eq. 9–10 with dedup: N_tj = the rounds whose ring of t's bucket holds j.
  auto rounds_seen = [&](int64_t bh, int64_t j) {
    int64_t n = 0;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t* p = pos + ring[size_t(bh * R + r)] * cap;
      n += std::find(p, p + held[size_t(bh * R + r)], j) != p + held[size_t(bh * R + r)];
    }
    return n;
  };
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const double* qr = &qv[size_t(bh * D)];
    for (int64_t r = 0; r < R; ++r) {  // o^(r) and z^(r) of row t (Eq. 8) over the ring of t's bucket
      const int64_t at = ring[size_t(bh * R + r)], n = held[size_t(bh * R + r)];
      logits.clear();
      values.resize(size_t(n * Dv));
      ENG_DISPATCH(q.dtype(), T, {
        const T *K = s->keys.data<T>() + at * cap * D, *V = s->values.data<T>() + at * cap * Dv;
        std::copy(V, V + n * Dv, values.begin());
        for (int64_t e = 0; e < n; ++e) {
          const int64_t j = pos[at * cap + e];
          if (j == t) {
            logits.push_back(kSelfLogit);
            continue;
          }
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qr[d] * double(K[e * D + d]);
          logits.push_back(dot * scale - (dedup_ && R > 1 ? std::log(double(rounds_seen(bh, j))) : 0.0));
        }
      });
      z[size_t(r)] = softmax_row(logits, values, Dv, &o[size_t(r * Dv)]);
    }
    const double zmax = *std::max_element(z.begin(), z.end());  // Eq. 7: weights exp(z_r − logsumexp z)
    double total = 0;
    for (double zr : z) total += std::exp(zr - zmax);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t d = 0; d < Dv; ++d)
        out[size_t(bh * Dv + d)] += std::exp(z[size_t(r)] - zmax) / total * o[size_t(r * Dv + d)];
  }
  return from_vector(out, {B, H, 1, Dv}, q.dtype());
}

}  // namespace eng
