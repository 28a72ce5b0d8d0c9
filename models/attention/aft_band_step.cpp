// The recurrent form shared by aft-local and aft-conv (models/attention/aft.h): row t of the causal parallel form,
//
//   Y_t = σ(Q_t) ⊙ (Σ_{t' <= t} e^{K_t'} V_t' + Σ_{t − s < t' <= t} (e^{w_{t,t'}} − 1) e^{K_t'} V_t') / (same without V)
//
// The first sum runs over every earlier position, so it is kept as aft-simple's running (max, numerator,
// denominator); the band's keys are the last s positions, kept in a ring. Each term repeats ops/aft.cpp's
// forward_rows: aft_absorb for the sums, then e^{K_t' − m_t'} · aft_rescale(m_t', m_t) for the band, so step() equals
// the parallel form's row to the last bit. Cost per step: O(B·H·s·D); state O(B·G·s·D) whatever the length.
#include <cmath>
#include <limits>

#include "engine/autograd.h"
#include "engine/error.h"
#include "models/attention/aft.h"
#include "ops/activation.h"
#include "ops/aft.h"
#include "ops/binary.h"

namespace eng {

Tensor AftAttention::band_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state, int64_t s,
                               const std::vector<double>& w, bool per_head) const {
  const std::string who = "attention '" + name() + "' step";
  ENG_CHECK(v.shape() == k.shape() && q.size(3) == k.size(3), who, ": AFT is elementwise over the head dim, so k and "
            "v need q's head dim, got q ", q.shape(), ", k ", k.shape(), ", v ", v.shape());
  auto* st = dynamic_cast<AftBandState*>(&state);
  ENG_CHECK(st, who, ": the state was not made by this variant's new_state()");
  ENG_CHECK(st->length == st->absorbed, who, ": state.length is ", st->length, " but the state holds ", st->absorbed,
            " positions (advance length by one after each step)");
  const int64_t B = q.size(0), H = q.size(1), G = k.size(1), D = k.size(3);
  if (!st->m.defined()) {
    st->m = full({B, G, 1, D}, -std::numeric_limits<double>::infinity(), DType::F64);
    st->num = zeros({B, G, 1, D}, DType::F64);
    st->den = zeros({B, G, 1, D}, DType::F64);
    st->ring_v = zeros({B, G, s, D}, DType::F64);
    st->ring_e = zeros({B, G, s, D}, DType::F64);
    st->ring_m = zeros({B, G, s, D}, DType::F64);
  }
  ENG_CHECK(k.shape() == Shape({st->m.size(0), st->m.size(1), 1, st->m.size(3)}) && st->ring_v.size(2) == s, who,
            ": k ", k.shape(), " does not match the state's sums ", st->m.shape(), " and ring ", st->ring_v.shape());
  NoGradGuard no_grad;
  const std::vector<double> kv = k.to_vector(), vv = v.to_vector();
  double *m = st->m.data<double>(), *num = st->num.data<double>(), *den = st->den.data<double>();
  double *ring_v = st->ring_v.data<double>(), *ring_e = st->ring_e.data<double>(), *ring_m = st->ring_m.data<double>();
  const int64_t t = st->absorbed;
  auto ring_at = [&](int64_t bg, int64_t pos, int64_t d) { return size_t((bg * s + pos % s) * D + d); };
  for (int64_t bg = 0; bg < B * G; ++bg)
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = size_t(bg * D + d), r = ring_at(bg, t, d);
      aft_absorb(m[i], num[i], den[i], kv[i], vv[i]);
      ring_v[r] = vv[i];
      ring_m[r] = m[i];
      ring_e[r] = std::exp(kv[i] - m[i]);
    }
  ENG_CHECK(int64_t(w.size()) == (per_head ? H : 1) * s, who, ": ", w.size(), " band weights for ", H, " heads and ",
            s, " offsets");
  std::vector<double> ew1(w.size());  // e^w − 1 once per (head, offset), as the parallel form
  for (size_t i = 0; i < w.size(); ++i) ew1[i] = std::expm1(w[i]);
  std::vector<double> y(size_t(B * H * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bg = b * G + h / (H / G);
      const double* ew1_h = &ew1[size_t((per_head ? h : 0) * s)];
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = size_t(bg * D + d);
        double n = num[i], z = den[i];
        for (int64_t off = -(s - 1); off <= 0; ++off) {  // the parallel form's order of the band's terms
          const int64_t t2 = t + off;
          if (t2 < 0) continue;
          const size_t r2 = ring_at(bg, t2, d);
          const double c = ew1_h[off + s - 1] * ring_e[r2] * aft_rescale(ring_m[r2], m[i]);
          n += c * ring_v[r2];
          z += c;
        }
        y[size_t((b * H + h) * D + d)] = n / z;
      }
    }
  st->absorbed++;
  return mul(sigmoid(q), from_vector(y, q.shape(), q.dtype()));
}

}  // namespace eng
