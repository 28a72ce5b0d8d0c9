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
#include <cmath>
#include <limits>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "models/attention/aft.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/select.h"
#include "ops/unary.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION("aft-full",
                       "AFT-full (Zhai et al. 2021): learned T x T position bias w (factor=r: w = u v^T), O(T^2 D) "
                       "as GEMMs, causal or not",
                       [](const AttentionConfig& c) { return std::make_unique<AftFull>(c); });

AftFull::AftFull(const AttentionConfig& config)
    : AftAttention(config, true), factor_(config.options.get_int("factor", 0, IntRange::at_least(0))) {  // 0: w unfactorised
  ENG_CHECK(max_len_ >= 1, "attention 'aft-full': needs AttentionConfig::max_len >= 1 (w is max_len x max_len), got ",
            max_len_);
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

}  // namespace eng
