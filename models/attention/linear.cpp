#include "models/attention/linear.h"

#include <cmath>

#include "engine/autograd.h"
#include "engine/error.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/linear_attention.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(linear, "linear", "linear attention (Katharopoulos et al. 2020), elu+1 features; causal with a causal mask",
                       [](const AttentionConfig& c) { return std::make_unique<LinearAttention>(c, false); });

LinearAttention::LinearAttention(const AttentionConfig& config, bool always_causal)
    : always_causal_(always_causal),
      phi_(make_feature_map(config.options.get_string("feature_map", "elu"))),
      eps_(config.options.get_double("eps", 1e-6, RealRange::at_least(0))) {
  accepts_.cross = !always_causal_;  // the non-causal sums take any number of keys
  // docs/cuda.md: the causal kernels have a CUDA form (elu + 1 fused), the non-causal one has none.
  accepts_.cuda = always_causal_ && phi_->fused() == LinearFeature::EluPlusOne;
  accepts_.why_not = always_causal_ ? "it forms no (query, key) logits, and its causal sums, taken under any mask, "
                                      "start at position 0"
                                    : "it forms no (query, key) logits, and its causal sums start at position 0";
}

Tensor LinearAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  LinearAttentionArgs args{phi_->fused(), eps_, mask.key_lengths};
  if (!always_causal_ && !mask.causal) return linear_attention(phi_->apply(q), phi_->apply(k), v, args);
  // A causal mask's offset is refused before this; causal-linear is causal under any mask, so checks it here.
  ENG_CHECK(mask.query_offset == 0, "attention '", name(),
            "': the causal parallel form needs its queries from position 0, got query_offset ", mask.query_offset,
            " (use step() to continue a sequence)");
  return causal_linear_attention(phi_->apply(q), phi_->apply(k), v, args);
}

std::unique_ptr<AttentionState> LinearAttention::new_state() const { return std::make_unique<LinearState>(); }

Tensor LinearAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                    const AttentionMask&) {
  auto* st = tag_cast<LinearState>(&state);
  ENG_CHECK(st, "attention '", name(), "' step: the state was not made by this variant's new_state()");
  NoGradGuard no_grad;
  Tensor fq = phi_->apply(q), fk = phi_->apply(k);
  if (!st->s.defined()) {
    // Signed features cancel in f32 sums: such a state is kept in f64 (ops/linear_attention.h).
    const bool wide = phi_->signed_features() && q.dtype() == DType::F32 && q.device() == Device::CPU;
    const DType t = wide ? DType::F64 : q.dtype();
    st->s = zeros_on({q.size(0), q.size(1), fq.size(3), v.size(3)}, t, q.device());
    st->z = zeros_on({q.size(0), q.size(1), fq.size(3)}, t, q.device());
  }
  return linear_attention_step(fq, fk, v, st->s, st->z, {phi_->fused(), eps_, {}});
}

std::unique_ptr<AttentionState> LinearAttention::memory_state(const Tensor& k, const Tensor& v,
                                                              const AttentionMask& mask) const {
  ENG_CHECK(!always_causal_ && !mask.causal, "attention '", name(), "' memory: cross-attention over a memory is not "
            "causal");
  ENG_CHECK(k.dim() == 4 && v.dim() == 4, "attention '", name(), "' memory: k and v must be [B, H, L, D], got k ",
            k.shape(), ", v ", v.shape());
  check_accepted(mask, k.size(2), k.size(2), " memory");
  NoGradGuard no_grad;
  const int64_t B = k.size(0), L = k.size(2);
  Tensor fk = phi_->features(k);
  if (!mask.key_lengths.empty()) {  // padding zeroes φ(k), after the feature map
    check_attention_mask(mask, B, k.size(1), 1, L, k.dtype(), ("attention '" + name() + "' memory").c_str());
    std::vector<double> keep(size_t(B * L), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < mask.key_lengths[size_t(b)]; ++j) keep[size_t(b * L + j)] = 1.0;
    fk = mul(fk, from_vector(keep, {B, 1, L, 1}, k.dtype()));
  }
  auto st = std::make_unique<LinearState>();
  st->s = matmul(transpose(fk, 2, 3), v);  // Σ_j φ(k_j) v_jᵀ
  st->z = sum(fk, {2});                   // Σ_j φ(k_j)
  st->length = L;
  return st;
}

Tensor LinearAttention::attend_state(const Tensor& q, const AttentionState& state) const {
  const auto* st = tag_cast<const LinearState>(&state);
  ENG_CHECK(st && st->s.defined(), "attention '", name(), "': the memory state was not made by memory_state()");
  ENG_CHECK(q.dim() == 4 && q.size(0) == st->s.size(0) && q.size(1) == st->s.size(1), "attention '", name(),
            "' memory: q ", q.shape(), " does not match the memory state ", st->s.shape());
  NoGradGuard no_grad;
  Tensor s = st->s, z = st->z;  // read only: no k and v to absorb
  Tensor fq = phi_->apply(q);
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < q.size(2); ++i)
    rows.push_back(linear_attention_step(narrow(fq, 2, i, 1), Tensor(), Tensor(), s, z, {phi_->fused(), eps_, {}}));
  return q.size(2) == 1 ? rows[0] : concat(rows, 2);
}

}  // namespace eng
