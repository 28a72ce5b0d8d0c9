#include "models/attention/reformer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "engine/error.h"
#include "engine/rng.h"
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
                       {{"buckets", "4"}, {"chunk", "4"}});  // the sweep's 16 positions in 4 chunks

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

// How the prefix 0 … t of one (batch, head) sorts, per round: position j sits at slot start[b_j] + rank_j (the
// positions of lower buckets, then its rank within its own bucket: a stable sort), in chunk slot / c; t sees the
// positions of its own chunk and, with several chunks, of the previous one (Eq. 5).
struct PrefixChunks {
  const RowCache& placed;  // [B, H, ·, 2R]: bucket and rank of every position, per round
  int64_t bh, R, nb, c, nc;
  std::vector<int64_t> start, own, prev;  // [R, nb], [R], [R]

  PrefixChunks(const RowCache& p, const int64_t* counts, int64_t bh_, int64_t t, int64_t R_, int64_t nb_, int64_t c_)
      : placed(p), bh(bh_), R(R_), nb(nb_), c(c_), nc((t + c_) / c_), start(size_t(R_ * nb_)), own(size_t(R_)),
        prev(size_t(R_)) {
    for (int64_t r = 0; r < R; ++r) {
      int64_t at = 0;
      for (int64_t bk = 0; bk < nb; ++bk) start[size_t(r * nb + bk)] = at, at += counts[r * nb + bk];
      own[size_t(r)] = chunk(t, r);
      prev[size_t(r)] = (own[size_t(r)] + nc - 1) % nc;
    }
  }
  int64_t chunk(int64_t j, int64_t r) const {
    const int64_t* p = placed.ids(bh, j) + 2 * r;
    return (start[size_t(r * nb + p[0])] + p[1]) / c;
  }
  bool seen(int64_t j, int64_t r) const {
    const int64_t ch = chunk(j, r);
    return ch == own[size_t(r)] || (nc > 1 && ch == prev[size_t(r)]);
  }
};

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
  accepts_.prefix_step = true;
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
  const int64_t R = rounds_, BH = B * H, c = std::min(chunk_, N), nc = (N + c - 1) / c, Np = nc * c;
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
      for (int64_t s = 0; s < N; ++s) {
        L.order[size_t(base * Np + s)] = perm[size_t(s)];
        L.slot[size_t(base * N + perm[size_t(s)])] = s;
      }
    }
  L.key_end.resize(size_t(B * N));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i) L.key_end[size_t(b * N + i)] = attention_key_end(mask, b, i, N);
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

// Row t of the causal form of the prefix 0 … t (reformer.h): per round, the prefix sorted stably by bucket puts
// position j at slot start[b_j] + rank_j; t (the last of its bucket) sees the keys of its chunk and of the previous
// one (Eq. 5), its own with self_logit; the rounds are combined by Eq. 7.
Tensor ReformerAttention::attend_step(const Tensor& q, const Tensor&, const Tensor& v, AttentionState& state,
                                      const AttentionMask&) {
  auto* s = dynamic_cast<ReformerState*>(&state);
  const std::string who = "attention 'reformer' step";
  ENG_CHECK(s, who, ": the state was not made by this variant's new_state()");
  const int64_t t = s->length, B = q.size(0), H = q.size(1), D = q.size(3), G = v.size(1), Dv = v.size(3);
  const int64_t R = rounds_, c = std::min(chunk_, t + 1);
  check_step_length(who, t, s->keys.stored());
  s->keys.append(shared_keys(q), who);
  s->values.append(v, who);
  if (t == 0) s->counts = zeros({B, H, R, nb_}, DType::I64);
  const std::vector<int64_t> bucket = hash(q, call());  // [R, B·H]: t's bucket, and its rank = the bucket's count
  int64_t* counts = s->counts.data<int64_t>();
  std::vector<double> placed(size_t(B * H * 2 * R));
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t bk = bucket[size_t(r * B * H + bh)];
      placed[size_t(bh * 2 * R + 2 * r)] = double(bk);
      placed[size_t(bh * 2 * R + 2 * r + 1)] = double(counts[(bh * R + r) * nb_ + bk]++);
    }
  s->placed.append(from_vector(placed, {B, H, 1, 2 * R}, DType::I64), who);

  const std::vector<double> qv = q.to_vector();
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> key(static_cast<size_t>(D)), logits, values, o(size_t(R * Dv)), z(static_cast<size_t>(R)),
      out(size_t(B * H * Dv));
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const PrefixChunks sorted(s->placed, &counts[bh * R * nb_], bh, t, R, nb_, c);
    const int64_t bg = bh / H * G + bh % H / (H / G);
    const double* qr = &qv[size_t(bh * D)];
    for (int64_t r = 0; r < R; ++r) {  // o^(r) and z^(r) of row t (Eq. 8)
      logits.clear();
      values.clear();
      for (int64_t j = 0; j <= t; ++j) {
        if (!sorted.seen(j, r)) continue;
        values.resize(values.size() + size_t(Dv));
        s->values.read(bg, j, &values[values.size() - size_t(Dv)]);
        if (j == t) {
          logits.push_back(kSelfLogit);
          continue;
        }
        s->keys.read(bh, j, key.data());
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qr[d] * key[size_t(d)];
        int64_t rounds_seen = 1;  // Eq. 9–10 with dedup: − log of the rounds in which t sees j
        if (dedup_ && R > 1) {
          rounds_seen = 0;
          for (int64_t r2 = 0; r2 < R; ++r2) rounds_seen += sorted.seen(j, r2);
        }
        logits.push_back(dot * scale - std::log(double(rounds_seen)));
      }
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
