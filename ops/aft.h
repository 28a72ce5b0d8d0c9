// The weighted average at the heart of the Attention Free Transformer (Zhai et al. 2021, Eq. 2 without σ(Q)):
//
//   out_t = Σ_{t'} exp(K_{t'} + w_{t,t'}) ⊙ V_{t'} / Σ_{t'} exp(K_{t'} + w_{t,t'})
//
// per batch element, head and feature d, over the keys t' that row t sees (t' < key_lengths[b]; causal: t' <= t),
// with w nonzero only on a band of offsets t' − t in [lo, hi] (empty when hi < lo: aft-simple). It is computed as
// the unbiased sum plus a band correction, Σ_{t'} e^K V + Σ_{band} (e^w − 1) e^K V (and the same for the
// denominator), every exponent of K taken relative to m_t, the maximum key row t sees (a running maximum when
// causal, with the sums rescaled as it grows, as in online softmax), so exp never overflows and no prefix
// underflows to 0/0 however far apart the keys are. Accumulation is in double for f32 inputs too.
//
// k, v [B, H, T, D]; w: per_head ? [H, hi − lo + 1] (one kernel per head, aft-conv) : [R >= T, hi − lo + 1] (row t,
// column t' − t − lo, shared by the heads, aft-local); undefined when the band is empty. Returns [B, H, T, D]; a row
// that sees no key is 0. Cost: O(B·H·T·D·(hi − lo + 1)) time (O(B·H·T·D) for an empty band), O(B·H·T·D) saved for
// the backward. Differentiable in k, v and w (op `aft_weighted`). Threaded over (b, h); results do not depend on
// the thread count.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace eng {

struct AftArgs {
  bool causal = false;
  std::vector<int64_t> key_lengths;  // per batch element; empty: no padding
  int64_t lo = 0, hi = -1;           // the band of offsets t' − t where w acts
  bool per_head = false;
};

Tensor aft_weighted(const Tensor& k, const Tensor& v, const Tensor& w, const AftArgs& args);

// Absorbs key k with value v into a running (max, numerator, denominator): the numerator and denominator stay
// relative to e^max, rescaled when the maximum grows. Starts from (−inf, 0, 0). Shared by aft_weighted and
// aft-simple's recurrent form, so that step() repeats the parallel form's arithmetic exactly.
inline void aft_absorb(double& m, double& num, double& den, double k, double v) {
  const double m_new = std::max(m, k);
  const double scale = std::exp(m - m_new);  // 0 for the first key (m = −inf)
  const double e = std::exp(k - m_new);
  num = num * scale + e * v;
  den = den * scale + e;
  m = m_new;
}

// e^{m_from − m_to} for m_from <= m_to. The running maximum changes rarely, so the common case costs no exp; with
// it, e^{K_t2 − m_t} = e^{K_t2 − m_t2} · aft_rescale(m_t2, m_t) needs one exp per key, not one per (row, key).
// Shared with aft-local's and aft-conv's recurrent form for the same reason as aft_absorb.
inline double aft_rescale(double m_from, double m_to) { return m_from == m_to ? 1.0 : std::exp(m_from - m_to); }

}  // namespace eng
