// `aft-full`: AFT with a learned pair-wise position bias w ∈ R^{max_len×max_len}, shared by the heads (Eq. 2):
//
//   Y_t = σ(Q_t) ⊙ Σ_{t'} exp(K_{t'} + w_{t,t'}) ⊙ V_{t'} / Σ_{t'} exp(K_{t'} + w_{t,t'})
//
// computed as two GEMMs with maxima subtracted so that exp never overflows:
//   num = exp(w − m_w) @ (exp(K − m_K) ⊙ V),  den = exp(w − m_w) @ exp(K − m_K),  Y = σ(Q) ⊙ num / den
// with m_w(t) the maximum of row t of w and m_K a per-feature shift of the keys (both constants: they
// cancel in the ratio). Causal: w_{t,t'} = −inf for t' > t. Cost per head: O(T²·D) time, O(T² +
// T·D) memory (the T × T matrix exp(w − m_w), never T × T × D).
//
// Not causal, m_K is the maximum of each feature over the visible keys: every row sees the key where K = m_K, so
// exp never overflows and den >= e^{−(range of its row of w)}. Causal, a maximum over the whole sequence would let
// future keys move (and underflow) a row's sums, so m_K is the first key instead, which every row sees: den never
// underflows (its first term is e^{w_{t,0} − m_w(t)}), and the GEMMs run in f64 so that exp(K − K_0) overflows only
// for keys more than ~700 above the first (f32 would allow 88), at twice the cost.
//
// Options: factor = r (> 0): the factorised w = u vᵀ with u, v ∈ R^{max_len×r}; 0 (default): w itself. Needs
// AttentionConfig::max_len >= 1 and T <= max_len; self-attention only (w is indexed by position).
//
// Recurrent form: a cache of every position, not running sums. Running sums need e^{w_{t,t'}} = f(t)·g(t') (then
// Σ_{t'} g(t') e^{K_t'} V_t' accumulates once for all rows), i.e. w_{t,t'} = a_t + b_t'; a learned T × T w is not of
// that form, and neither is the factorised u vᵀ (e^{Σ_r u_{t,r} v_{t',r}} does not split into a product over t and
// t'). So row t needs every earlier key with its own weight e^{w_{t,t'}}. The state keeps e^{K − K_0} and
// e^{K − K_0} ⊙ V in double (the parallel form's terms, the size of a KV cache); step t forms row t of w (factor:
// u_t vᵀ, O(t·r)) and the two weighted sums: O(t·D) per step and head, O(t·D) memory per K/V group; t < max_len.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "models/attention/aft.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/select.h"
#include "ops/unary.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(aft_full, "aft-full",
                       "AFT-full (Zhai et al. 2021): learned T x T position bias w (factor=r: w = u v^T), O(T^2 D) "
                       "as GEMMs, causal or not",
                       [](const AttentionConfig& c) { return std::make_unique<AftFull>(c); });

AftFull::AftFull(const AttentionConfig& config)
    : AftAttention(config, true), factor_(config.options.get_int("factor", 0, IntRange::at_least(0))) {  // 0: w unfactorised
  ENG_CHECK(max_len_ >= 1, "attention 'aft-full': needs AttentionConfig::max_len >= 1 (w is max_len x max_len), got ",
            max_len_);
  accepts_.grouped_step = true;
  if (factor_ == 0) {
    // w = 0 starts the layer as aft-simple (uniform position bias); training moves it from there.
    w_ = register_parameter("w", zeros({max_len_, max_len_}));
    return;
  }
  // u random, v = 0: w = u vᵀ starts at exactly 0 (aft-simple) as above, while the gradient of v (= gᵀu) is not 0;
  // both at 0 would be a saddle point that never moves. std 1/√r keeps (u vᵀ)_{t,t'} on the scale of v's entries.
  Rng rng(config.seed);
  std::vector<double> u(size_t(max_len_ * factor_));
  for (double& x : u) x = rng.normal() / std::sqrt(double(factor_));
  u_ = register_parameter("u", from_vector(u, {max_len_, factor_}, DType::F32));
  v_ = register_parameter("v", zeros({max_len_, factor_}));
}

Tensor AftFull::mix(const Tensor& k, const Tensor& v, int64_t, bool causal, const AttentionMask& mask) {
  const int64_t B = k.size(0), T = k.size(2);
  check_max_len(T);
  const DType ct = causal ? DType::F64 : k.dtype();
  const double inf = std::numeric_limits<double>::infinity();
  Tensor w = factor_ > 0 ? matmul(narrow(u_, 0, 0, T), transpose(narrow(v_, 0, 0, T), 0, 1))
                         : narrow(narrow(w_, 0, 0, T), 1, 0, T);
  w = w.to(ct);
  if (causal) {
    std::vector<double> future(size_t(T * T), 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = t + 1; j < T; ++j) future[size_t(t * T + j)] = 1;
    w = masked_fill(w, from_vector(future, {T, T}, DType::I64), -inf);
  }
  Tensor keys = k.to(ct);
  std::vector<double> no_key(size_t(B), 0.0);  // 1 for a batch element whose keys are all padding
  if (!mask.key_lengths.empty()) {
    std::vector<double> padded(size_t(B * T), 0.0);
    for (int64_t b = 0; b < B; ++b) {
      no_key[size_t(b)] = mask.key_lengths[size_t(b)] == 0;
      for (int64_t j = mask.key_lengths[size_t(b)]; j < T; ++j) padded[size_t(b * T + j)] = 1;
    }
    // exp(−inf) = 0: padded keys drop out of both GEMMs exactly, whatever they hold, and get no gradient.
    keys = masked_fill(keys, from_vector(padded, {B, 1, T, 1}, DType::I64), -inf);
  }
  Tensor m_w, m_k;
  {
    NoGradGuard no_grad;
    m_w = max(w.detach(), {1}, true);  // [T, 1]; finite: every row keeps at least its diagonal
    // Causal: the first key, never a later one, so that no row's arithmetic depends on its future.
    const Tensor ref = causal ? narrow(keys.detach(), 2, 0, 1) : max(keys.detach(), {2}, true);
    std::vector<double> mk = ref.to_vector();
    for (double& x : mk)
      if (!std::isfinite(x)) x = 0;  // no visible key: any finite shift, the GEMMs give 0 / 0 -> guarded below
    m_k = from_vector(mk, {B, k.size(1), 1, k.size(3)}, ct);
  }
  const Tensor e_w = exp(sub(w, m_w));     // [T, T]
  const Tensor e_k = exp(sub(keys, m_k));  // [B, H, T, D]
  const Tensor num = matmul(e_w, mul(e_k, v.to(ct)));
  // A batch element without keys has num = den = 0; adding 1 to its den makes its output 0 rather than NaN.
  const Tensor den = add(matmul(e_w, e_k), from_vector(no_key, {B, 1, 1, 1}, ct));
  return div(num, den).to(k.dtype());
}

std::unique_ptr<AttentionState> AftFull::new_state() const { return std::make_unique<AftFullState>(); }

Tensor AftFull::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                            const AttentionMask&) {
  ENG_CHECK(v.shape() == k.shape() && q.size(3) == k.size(3), "attention 'aft-full' step: AFT is elementwise over the "
            "head dim, so k and v need q's head dim, got q ", q.shape(), ", k ", k.shape(), ", v ", v.shape());
  auto* st = dynamic_cast<AftFullState*>(&state);
  ENG_CHECK(st, "attention 'aft-full' step: the state was not made by this variant's new_state()");
  const int64_t t = st->length, H = q.size(1);
  ENG_CHECK(t == st->absorbed, "attention 'aft-full' step: state.length is ", t, " but the state holds ", st->absorbed,
            " positions (advance length by one after each step)");
  check_max_len(t + 1);
  NoGradGuard no_grad;
  const Tensor kd = k.to(DType::F64);
  if (t == 0) st->k0 = kd.clone();
  ENG_CHECK(k.shape() == st->k0.shape(), "attention 'aft-full' step: k ", k.shape(), " does not match the state's ",
            st->k0.shape());
  const Tensor e = exp(sub(kd, st->k0));
  st->cache.length = t;
  const auto [ce, cev] = kv_cache_append(st->cache, e, mul(e, v.to(DType::F64)), "attention 'aft-full'");
  st->absorbed++;
  // Row t of w over t' <= t, in f64 as the causal parallel form, shifted by its maximum.
  const Tensor row = factor_ > 0 ? matmul(narrow(u_, 0, t, 1), transpose(narrow(v_, 0, 0, t + 1), 0, 1))
                                 : narrow(narrow(w_, 0, t, 1), 1, 0, t + 1);
  std::vector<double> ew = row.to(DType::F64).to_vector();
  double m_w = -std::numeric_limits<double>::infinity();
  for (double x : ew) m_w = std::max(m_w, x);
  for (double& x : ew) x = std::exp(x - m_w);
  // num, den [B, G, 1, D] = ew [1, t + 1] @ the cached [B, G, t + 1, D]
  const Tensor weights = from_vector(ew, {1, 1, 1, t + 1}, DType::F64);
  const Tensor y = div(matmul(weights, cev), matmul(weights, ce));
  // The parallel form rounds Y to k's dtype before σ(Q) multiplies it.
  return mul(sigmoid(q), repeat_heads(y, H).to(q.dtype()));
}

}  // namespace eng
