// `aft-local`: AFT whose position bias is learned only near the diagonal (Eq. 2 with w' below):
//
//   w'_{t,t'} = w_{t,t'} if |t − t'| < s, else 0
//
// Keys outside the window still count (with w = 0): connectivity stays global, unlike local attention. Computed as
// the unbiased sums plus a correction on the band, Σ_{t'} e^K V + Σ_{|t−t'|<s} (e^w − 1) e^K V (and the same for
// the denominator), with exponents relative to the maximum key each row sees (ops/aft.h): O(T·s·D) time and
// O(T·D) memory per head, never O(T²·D).
//
// Parameters: w, a band [max_len, 2s − 1] shared by the heads, w[t, t' − t + s − 1] = w_{t,t'}. Options: window = s
// (1 <= s <= max_len, default min(16, max_len)). Needs AttentionConfig::max_len >= 1 and T <= max_len;
// self-attention only. Causal: offsets t' − t in [−(s − 1), 0].
//
// Recurrent form (aft_band_step.cpp): the running sums over every position plus a ring of the last s positions,
// with row t's s band weights read from w; O(s·D) per step, O(s·D) memory per K/V group; t < max_len.
#include <algorithm>

#include "engine/autograd.h"
#include "engine/error.h"
#include "models/attention/aft.h"
#include "ops/aft.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(aft_local, "aft-local",
                       "AFT-local (Zhai et al. 2021): position bias learned within |t - t'| < window, zero outside, "
                       "O(T window D), causal or not",
                       [](const AttentionConfig& c) { return std::make_unique<AftLocal>(c); });

AftLocal::AftLocal(const AttentionConfig& config) : AftAttention(config, true) {
  ENG_CHECK(max_len_ >= 1, "attention 'aft-local': needs AttentionConfig::max_len >= 1 (w has a row per position), "
            "got ", max_len_);
  s_ = config.options.get_int("window", std::min<int64_t>(16, max_len_), IntRange{1, max_len_});
  // w = 0 starts the layer as aft-simple (uniform position bias); training moves it from there.
  band_ = register_parameter("w", zeros({max_len_, 2 * s_ - 1}));
  accepts_.grouped_step = true;
}

Tensor AftLocal::mix(const Tensor& k, const Tensor& v, int64_t, bool causal, const AttentionMask& mask) {
  check_max_len(k.size(2));
  const Tensor w = band_.to(k.dtype());
  // Causal rows use the columns of offsets −(s − 1) .. 0 only.
  return aft_weighted(k, v, causal ? narrow(w, 1, 0, s_) : w,
                      {causal, mask.key_lengths, -(s_ - 1), causal ? 0 : s_ - 1, false});
}

std::unique_ptr<AttentionState> AftLocal::new_state() const { return std::make_unique<AftBandState>(); }

Tensor AftLocal::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                             const AttentionMask&) {
  check_max_len(state.length + 1);
  NoGradGuard no_grad;
  // Row t's causal columns, offsets −(s − 1) .. 0, in the dtype the parallel form reads them in.
  const std::vector<double> w = narrow(narrow(band_, 0, state.length, 1), 1, 0, s_).to(k.dtype()).to_vector();
  return band_step(q, k, v, state, s_, w, false);
}

}  // namespace eng
