// `aft-conv`: AFT whose position bias is a depth-wise 1-D convolution kernel per head, shared by all positions
// (Eq. 2 with w_{t,t'} = w_h[t' − t] on s offsets, 0 elsewhere):
//
//   Y_t = σ(Q_t) ⊙ (conv(e^K ⊙ V, e^{w_h} − 1) + Σ_{t'} e^K ⊙ V) / (conv(e^K, e^{w_h} − 1) + Σ_{t'} e^K)
//
// with exponents relative to the maximum key each row sees (ops/aft.h). O(T·s·D) time, O(T·D) memory per head; the
// parameters are H × s, independent of the sequence length (no max_len needed).
//
// Offsets t' − t of the kernel: causal [−(s − 1), 0] (s taps into the past); otherwise centred,
// [−⌊s/2⌋, s − 1 − ⌊s/2⌋]. Options: window = s (>= 1, default 7). Self-attention only.
//
// Recurrent form (aft_band_step.cpp): the running sums over every position plus a ring of the last s positions (the
// causal kernel's taps); O(H·s·D) per step, O(s·D) memory per K/V group, at any length.
#include "engine/autograd.h"
#include "engine/error.h"
#include "models/attention/aft.h"
#include "ops/aft.h"

namespace eng {

ENG_REGISTER_ATTENTION(aft_conv, "aft-conv",
                       "AFT-conv (Zhai et al. 2021): per-head depth-wise kernel of window taps as position bias, "
                       "O(T window D), causal or not",
                       [](const AttentionConfig& c) { return std::make_unique<AftConv>(c); });

AftConv::AftConv(const AttentionConfig& config) : AftAttention(config, true), s_(config.options.get_int("window", 7, IntRange::at_least(1))) {
  // w = 0 starts the layer as aft-simple (uniform position bias); training moves it from there.
  kernel_ = register_parameter("w", zeros({heads_, s_}));
  accepts_.grouped_step = true;
}

std::pair<int64_t, int64_t> AftConv::offsets(bool causal) const {
  if (causal) return {-(s_ - 1), 0};
  return {-(s_ / 2), s_ - 1 - s_ / 2};
}

Tensor AftConv::mix(const Tensor& k, const Tensor& v, int64_t, bool causal, const AttentionMask& mask) {
  ENG_CHECK(k.size(1) == heads_, "attention 'aft-conv': k ", k.shape(), " has ", k.size(1),
            " heads, the variant was built for ", heads_, " (one kernel per head)");
  const auto [lo, hi] = offsets(causal);
  return aft_weighted(k, v, kernel_.to(k.dtype()), {causal, mask.key_lengths, lo, hi, true});
}

std::unique_ptr<AttentionState> AftConv::new_state() const { return std::make_unique<AftBandState>(); }

Tensor AftConv::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                            const AttentionMask&) {
  ENG_CHECK(q.size(1) == heads_, "attention 'aft-conv' step: q ", q.shape(), " has ", q.size(1),
            " heads, the variant was built for ", heads_, " (one kernel per head)");
  NoGradGuard no_grad;
  // Causal taps, offsets −(s − 1) .. 0 = kernel columns 0 .. s − 1.
  return band_step(q, k, v, state, s_, kernel_.to(k.dtype()).to_vector(), true);
}

}  // namespace eng
