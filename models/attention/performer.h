// Performer attention (Choromanski et al. 2021, "Rethinking Attention with Performers"), FAVOR+: the `performer`
// variant. The softmax kernel exp(qᵀk/√D) is estimated by positive random features (Lemma 1),
//
//   φ(x) = exp(ωᵀx' − |x'|²/2) / √m,  x' = x·D^(-1/4),  so that  E[φ(q)ᵀφ(k)] = exp(qᵀk/√D),
//
// with the m rows of ω drawn as orthogonal random features, and attention is computed in linear form:
// out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / φ(q_i)ᵀ Σ_j φ(k_j) (Eq. 1 with A estimated by φ(Q)φ(K)ᵀ), causal or not,
// through the kernels of ops/linear_attention.h. φ is built from differentiable ops, so q and k get gradients;
// ω is a constant. Cost per head: O(N·m·(D + Dv)) time, O(N·m) memory for the features.
//
// Stabilisers, each a constant that cancels in the ratio and depends on no future key (docs/attention/performer.md):
// keys subtract c = max_r |ω_r|²/2, an upper bound of every key exponent since ωᵀx' − |x'|²/2 ≤ |ω|²/2, so key
// features never exceed 1/√m; each query subtracts its own maximum exponent and adds back min(c, 60), so that
// φ(q)ᵀφ(k) keeps the scale of the true estimate (its row divided by e^(max exponent)) rather than e^-c of it.
//
// Options: features = m (default 256); redraw = always | every:N | never (default always): in training mode a new
// ω is drawn before every N-th forward call; in eval mode ω never changes. Masks: causal and key padding; keep,
// bias and ALiBi have no linear form and are refused. Recurrent form: step() keeps s [B, H, m, Dv], z [B, H, m].
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "models/attention/attention.h"

namespace eng {

// ω [m, D] (f64) of draw `draw` for `seed`: ceil(m / D) independent Haar-random orthogonal D × D blocks stacked
// and cut to m rows, row r then rescaled to the norm of an independent N(0, I_D) vector, so that every row is
// marginally N(0, I_D) while rows of one block stay exactly orthogonal. A pure function of (seed, draw).
Tensor performer_projection(int64_t features, int64_t head_dim, uint64_t seed, uint64_t draw);

struct PerformerState : AttentionState {
  Tensor s, z;            // [B, H, m, Dv], [B, H, m]; undefined before the first step
  int64_t absorbed = 0;   // positions absorbed into s and z
  uint64_t draw = 0;      // the draw of ω they were built with
};

class PerformerAttention : public Attention {
 public:
  explicit PerformerAttention(const AttentionConfig& config);
  std::string name() const override { return "performer"; }
  std::unique_ptr<AttentionState> new_state() const override;

  // ω is not a parameter: it is a function of (config seed, draw), and the draw a function of the training
  // forward calls counted so far, kept in the buffer "redraw_calls" so that a checkpoint replays it.
  const Tensor& projection() const { return omega_; }  // [m, D], f64
  uint64_t draw() const { return draw_; }
  int64_t training_calls() const { return calls_.data<int64_t>()[0]; }
  void set_training_calls(int64_t calls);

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

 private:
  uint64_t draw_for_call(int64_t call) const;
  void use_draw(uint64_t draw);
  void sync_draw();  // ω of the draw the counter implies (after a checkpoint load changed the counter)
  Tensor features(const Tensor& x, bool query) const;
  double kernel_eps() const;
  void check_head_dim(const Tensor& q, const Tensor& k, const char* where) const;

  int64_t m_, D_;
  uint64_t seed_;
  int64_t redraw_every_;  // 1: always, N: every:N, 0: never
  Tensor calls_;          // [1] i64 buffer: training forward calls so far
  uint64_t draw_ = 0;
  Tensor omega_;          // [m, D], f64
  Tensor omega_t_;        // ωᵀ [D, m], f64, contiguous
  double c_ = 0;          // max_r |ω_r|²/2, the key stabiliser
};

}  // namespace eng
