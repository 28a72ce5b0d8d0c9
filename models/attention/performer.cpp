#include "models/attention/performer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/parse_number.h"
#include "engine/rng.h"
#include "ops/binary.h"
#include "ops/linear_attention.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/unary.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(performer, "performer",
                       "Performer / FAVOR+ (Choromanski et al. 2021): positive orthogonal random features, causal or "
                       "not, RNN form",
                       [](const AttentionConfig& c) { return std::make_unique<PerformerAttention>(c); });

namespace {

// The performer's own Philox key, so that ω never reuses the words of the model's generator Rng(seed), which
// initialises the weights; draw d starts at word d·2^32 of it.
constexpr uint64_t kStream = 0x70657266'6f726d72ull;  // "performr"
constexpr int kDrawShift = 32;
// The most of the key shift c given back to the queries: query features stay below e^60/√m, finite in f32.
constexpr double kMaxQueryLift = 60;
// The kernels' denominator guard, on the scale of the true estimate. Positive features make every denominator
// > 0 except a query with no visible key (0/0), so it only needs to be positive and far below real denominators.
constexpr double kEps = 1e-12;

// A Haar-distributed orthogonal D × D matrix, row-major (Mezzadri 2007): Householder QR of a Gaussian matrix
// G = QR, then column j of Q multiplied by sign(R_jj). Without that correction Q would depend on the sign
// convention of the reflections (Householder makes R_00 = -sign(G_00)|G_:0|, so Q_00 would always be < 0).
std::vector<double> haar_orthogonal(int64_t D, Rng& rng) {
  const size_t n = static_cast<size_t>(D);
  std::vector<double> a(n * n), q(n * n, 0.0), u(n), sign(n);
  for (double& x : a) x = rng.normal();
  for (int64_t i = 0; i < D; ++i) q[size_t(i * D + i)] = 1;
  auto A = [&](int64_t i, int64_t j) -> double& { return a[size_t(i * D + j)]; };
  for (int64_t k = 0; k < D; ++k) {
    // H_k = I − 2uuᵀ/uᵀu maps column k, rows k.., to alpha·e_k; alpha takes the sign opposite to the pivot,
    // so u_k = A_kk − alpha never cancels.
    double norm2 = 0;
    for (int64_t i = k; i < D; ++i) norm2 += A(i, k) * A(i, k);
    const double alpha = A(k, k) > 0 ? -std::sqrt(norm2) : std::sqrt(norm2);
    double uu = 0;
    for (int64_t i = k; i < D; ++i) {
      u[size_t(i)] = A(i, k) - (i == k ? alpha : 0.0);
      uu += u[size_t(i)] * u[size_t(i)];
    }
    if (uu > 0) {
      for (int64_t j = k; j < D; ++j) {  // A = H_k A: R accumulates in A's upper triangle
        double t = 0;
        for (int64_t i = k; i < D; ++i) t += u[size_t(i)] * A(i, j);
        for (int64_t i = k; i < D; ++i) A(i, j) -= 2 * t / uu * u[size_t(i)];
      }
      for (int64_t r = 0; r < D; ++r) {  // Q = Q H_k, so that Q = H_0 H_1 ... H_{D-1} and G = QR
        double t = 0;
        for (int64_t i = k; i < D; ++i) t += q[size_t(r * D + i)] * u[size_t(i)];
        for (int64_t i = k; i < D; ++i) q[size_t(r * D + i)] -= 2 * t / uu * u[size_t(i)];
      }
    }
    sign[size_t(k)] = A(k, k) < 0 ? -1.0 : 1.0;
  }
  for (int64_t r = 0; r < D; ++r)
    for (int64_t j = 0; j < D; ++j) q[size_t(r * D + j)] *= sign[size_t(j)];
  return q;
}

int64_t parse_redraw(const std::string& s) {
  if (s == "always") return 1;
  if (s == "never") return 0;
  ENG_CHECK(s.rfind("every:", 0) == 0, "attention 'performer': option redraw must be always, never or every:N, got '",
            s, "'");
  return parse_int(s.substr(6), IntRange::at_least(1), "attention 'performer': option redraw every:N");
}

}  // namespace

Tensor performer_projection(int64_t features, int64_t head_dim, uint64_t seed, uint64_t draw) {
  const int64_t m = features, D = head_dim, blocks = (m + D - 1) / D;
  ENG_CHECK(m >= 1 && D >= 1, "performer_projection: features and head_dim must be >= 1, got ", m, " and ", D);
  // Every normal takes two words; one draw must fit in its 2^32 words.
  ENG_CHECK(2 * (blocks * D * D + m * D) < (int64_t(1) << kDrawShift), "performer_projection: ", m,
            " features of head dim ", D, " need more random words than one draw holds");
  Rng rng(seed ^ kStream, draw << kDrawShift);
  std::vector<double> omega(size_t(m * D));
  for (int64_t b = 0; b < blocks; ++b) {
    const std::vector<double> block = haar_orthogonal(D, rng);
    const int64_t rows = std::min(D, m - b * D);  // the last block keeps its first rows only
    std::copy(block.begin(), block.begin() + rows * D, omega.begin() + b * D * D);
  }
  for (int64_t r = 0; r < m; ++r) {  // row norms of independent Gaussian vectors: chi with D degrees of freedom
    double norm2 = 0;
    for (int64_t i = 0; i < D; ++i) {
      const double g = rng.normal();
      norm2 += g * g;
    }
    for (int64_t i = 0; i < D; ++i) omega[size_t(r * D + i)] *= std::sqrt(norm2);
  }
  return from_vector(omega, {m, D}, DType::F64);
}

PerformerAttention::PerformerAttention(const AttentionConfig& config)
    : m_(config.options.get_int("features", 256, IntRange::at_least(1))),
      D_(config.head_dim),
      seed_(config.seed),
      redraw_every_(parse_redraw(config.options.get_string("redraw", "always"))) {
  accepts_.cross = true;  // the non-causal sums take any number of keys
  accepts_.why_not = "random features form no (query, key) logits, and their causal sums start at position 0";
  calls_ = register_buffer("redraw_calls", zeros({1}, DType::I64));
  use_draw(0);
}

uint64_t PerformerAttention::draw_for_call(int64_t call) const {
  return redraw_every_ == 0 ? 0 : uint64_t(call / redraw_every_);
}

void PerformerAttention::use_draw(uint64_t draw) {
  draw_ = draw;
  omega_ = performer_projection(m_, D_, seed_, draw);
  omega_t_ = transpose(omega_, 0, 1).contiguous();
  double max_norm2 = 0;
  const double* w = omega_.data<double>();
  for (int64_t r = 0; r < m_; ++r) {
    double n2 = 0;
    for (int64_t i = 0; i < D_; ++i) n2 += w[r * D_ + i] * w[r * D_ + i];
    max_norm2 = std::max(max_norm2, n2);
  }
  c_ = max_norm2 / 2;
}

void PerformerAttention::set_training_calls(int64_t calls) {
  ENG_CHECK(calls >= 0, "attention 'performer': training_calls must be >= 0, got ", calls);
  calls_.data<int64_t>()[0] = calls;
  sync_draw();
}

void PerformerAttention::sync_draw() {
  const int64_t calls = training_calls();
  const uint64_t d = calls > 0 ? draw_for_call(calls - 1) : 0;
  if (d != draw_) use_draw(d);
}

// φ of Lemma 1 with the stabilisers of the header; x [B, H, L, D] -> [B, H, L, m].
Tensor PerformerAttention::features(const Tensor& x, bool query) const {
  const Tensor xs = mul_scalar(x, std::pow(double(D_), -0.25));  // x' = x D^(-1/4)
  const Tensor proj = matmul(xs, omega_t_.to(x.dtype()));         // ω_rᵀ x'
  Tensor expo;
  if (query)  // −|q'|²/2 is the same for every feature of a row, so the row maximum removes it too
    expo = add_scalar(sub(proj, max(proj, {3}, true)), std::min(c_, kMaxQueryLift));
  else
    expo = add_scalar(sub(proj, mul_scalar(sum(mul(xs, xs), {3}, true), 0.5)), -c_);
  return mul_scalar(exp(expo), 1.0 / std::sqrt(double(m_)));
}

// The features are the true ones times e^(min(c, 60) − max exponent) for queries and e^-c for keys; eps moves with
// them, so that it stays kEps on the true estimate's scale (divided by each query's own e^(max exponent)).
double PerformerAttention::kernel_eps() const { return kEps * std::exp(std::min(c_, kMaxQueryLift) - c_); }

void PerformerAttention::check_head_dim(const Tensor& q, const Tensor& k, const char* where) const {
  ENG_CHECK(q.size(3) == D_, "attention 'performer'", where, ": q ", q.shape(), " and k ", k.shape(), " have head dim ",
            q.size(3), ", the variant was built for head_dim ", D_);
}

Tensor PerformerAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  check_head_dim(q, k, "");
  check_attention_mask(mask, q.size(0), q.size(1), q.size(2), k.size(2), q.dtype(), "attention 'performer'");
  sync_draw();
  if (training()) {  // counted only once every check has passed
    const int64_t calls = training_calls();
    calls_.data<int64_t>()[0] = calls + 1;
    const uint64_t d = draw_for_call(calls);
    if (d != draw_) use_draw(d);
  }
  const LinearAttentionArgs args{LinearFeature::Identity, kernel_eps(), mask.key_lengths};
  const Tensor fq = features(q, true), fk = features(k, false);
  return mask.causal ? causal_linear_attention(fq, fk, v, args) : linear_attention(fq, fk, v, args);
}

std::unique_ptr<AttentionState> PerformerAttention::new_state() const { return std::make_unique<PerformerState>(); }

Tensor PerformerAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                       const AttentionMask&) {
  check_head_dim(q, k, " step");
  auto* st = dynamic_cast<PerformerState*>(&state);
  ENG_CHECK(st, "attention 'performer' step: the state was not made by this variant's new_state()");
  sync_draw();
  ENG_CHECK(st->length == st->absorbed, "attention 'performer' step: state.length is ", st->length,
            " but the state holds ", st->absorbed, " positions (advance length by one after each step)");
  if (st->s.defined()) {
    ENG_CHECK(st->draw == draw_, "attention 'performer' step: the state was built with draw ", st->draw,
              " of the random features, now at draw ", draw_, " (a training forward redrew them)");
    ENG_CHECK(q.size(0) == st->s.size(0) && q.size(1) == st->s.size(1) && v.size(3) == st->s.size(3) &&
                  q.dtype() == st->s.dtype(),
              "attention 'performer' step: q ", q.shape(), " and v ", v.shape(), " do not match the state ",
              st->s.shape());
  } else {
    st->s = zeros({q.size(0), q.size(1), m_, v.size(3)}, q.dtype());
    st->z = zeros({q.size(0), q.size(1), m_}, q.dtype());
    st->draw = draw_;
  }
  NoGradGuard no_grad;
  Tensor out = linear_attention_step(features(q, true), features(k, false), v, st->s, st->z,
                                     {LinearFeature::Identity, kernel_eps(), {}});
  st->absorbed++;
  return out;
}

}  // namespace eng
