// The checks shared by the AFT family (models/attention/aft.h) and `aft-simple`, AFT with w = 0:
//
//   Y_t = σ(Q_t) ⊙ Σ_{t'} softmax_{t'}(K)_{t'} ⊙ V_{t'}                 (Eq. 2 with w = 0)
//
// Not causal, the softmax over positions is the same for every query, so the sum is computed once: O(T·D) time
// and memory per head, and queries and keys may differ in length (cross-attention). Causal, it is a prefix sum
// kept stable by a running maximum (ops/aft.h): O(T·D). Recurrent form: step() keeps (max, numerator,
// denominator) per (b, h, d), O(D) per token, equal to the causal parallel form's row. No options.
#include <limits>

#include "engine/autograd.h"
#include "engine/error.h"
#include "models/attention/aft.h"
#include "ops/activation.h"
#include "ops/aft.h"
#include "ops/binary.h"
#include "ops/reduce.h"
#include "ops/select.h"
#include "ops/softmax.h"

namespace eng {

ENG_REGISTER_ATTENTION(aft_simple, "aft-simple",
                       "AFT-simple (Zhai et al. 2021): sigmoid(Q) * softmax-over-positions(K) . V, O(T D), causal "
                       "or not, RNN form",
                       [](const AttentionConfig& c) { return std::make_unique<AftSimple>(c); });

AftAttention::AftAttention(const AttentionConfig& config, bool indexed)
    : heads_(config.heads), max_len_(config.max_len), causal_(config.causal), indexed_(indexed) {
  accepts_.cross = !indexed;  // a position-indexed w pairs query t with key t'
  accepts_.why_not = "keep, bias and ALiBi act on (query, key) logits, which AFT never forms";
}

void AftAttention::check_max_len(int64_t T) const {
  ENG_CHECK(T <= max_len_, "attention '", name(), "': sequence length ", T, " exceeds max_len ", max_len_,
            " (w is sized by AttentionConfig::max_len)");
}

Tensor AftAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const std::string who = "attention '" + name() + "'";
  ENG_CHECK(v.size(3) == q.size(3), who, ": AFT is elementwise over the head dim, so v needs q's head dim, got q ",
            q.shape(), ", v ", v.shape());
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2);
  check_attention_mask(mask, B, H, Lq, Lk, q.dtype(), who.c_str());
  const bool causal = causal_ || mask.causal;  // a model built causal is causal whatever the call says
  ENG_CHECK(!(causal || indexed_) || (Lq == Lk && mask.query_offset == 0), who, ": ",
            causal ? "the causal parallel form" : "a position-indexed w", " needs as many queries as keys from "
            "position 0, got q ", q.shape(), ", k ", k.shape(), ", query_offset ", mask.query_offset);
  return mul(sigmoid(q), mix(k, v, Lq, causal, mask));
}

AftSimple::AftSimple(const AttentionConfig& config) : AftAttention(config, false) {}

Tensor AftSimple::mix(const Tensor& k, const Tensor& v, int64_t, bool causal, const AttentionMask& mask) {
  if (causal) return aft_weighted(k, v, Tensor(), {true, mask.key_lengths, 0, -1, false});
  Tensor keys = k;
  if (!mask.key_lengths.empty()) {
    // -inf before the softmax: padded keys get weight exactly 0, whatever they hold.
    const int64_t B = k.size(0), L = k.size(2);
    std::vector<double> padded(size_t(B * L), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = mask.key_lengths[size_t(b)]; j < L; ++j) padded[size_t(b * L + j)] = 1;
    keys = masked_fill(k, from_vector(padded, {B, 1, L, 1}, DType::I64), -std::numeric_limits<double>::infinity());
  }
  // The softmax subtracts each column's maximum, so it is stable for any range of K; an all-padded column is 0.
  return sum(mul(softmax(keys, 2), v), {2}, true);  // [B, H, 1, D], the same for every query
}

std::unique_ptr<AttentionState> AftSimple::new_state() const { return std::make_unique<AftSimpleState>(); }

Tensor AftSimple::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                              const AttentionMask&) {
  ENG_CHECK(v.shape() == q.shape(), "attention 'aft-simple' step: v needs q's shape, got q ", q.shape(), ", v ",
            v.shape());
  auto* st = dynamic_cast<AftSimpleState*>(&state);
  ENG_CHECK(st, "attention 'aft-simple' step: the state was not made by this variant's new_state()");
  ENG_CHECK(st->length == st->absorbed, "attention 'aft-simple' step: state.length is ", st->length, " but the state holds ",
            st->absorbed, " positions (advance length by one after each step)");
  if (st->m.empty()) {
    st->shape = q.shape();
    st->m.assign(size_t(q.numel()), -std::numeric_limits<double>::infinity());
    st->num.assign(size_t(q.numel()), 0.0);
    st->den.assign(size_t(q.numel()), 0.0);
  }
  ENG_CHECK(q.shape() == st->shape, "attention 'aft-simple' step: q ", q.shape(), " does not match the state's ", st->shape);
  NoGradGuard no_grad;
  const std::vector<double> kv = k.to_vector(), vv = v.to_vector();
  std::vector<double> y(kv.size());
  for (size_t i = 0; i < kv.size(); ++i) {
    aft_absorb(st->m[i], st->num[i], st->den[i], kv[i], vv[i]);  // the parallel form's arithmetic, in its order
    y[i] = st->num[i] / st->den[i];
  }
  st->absorbed++;
  return mul(sigmoid(q), from_vector(y, q.shape(), q.dtype()));
}

}  // namespace eng
