#include "models/attention/adaptive_span.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "ops/adaptive_span_attention.h"
#include "ops/binary.h"
#include "ops/reduce.h"
#include "ops/unary.h"

namespace eng {

ENG_REGISTER_ATTENTION(adaptive_span, "adaptive-span",
                       "softmax attention with a learned soft span per head, m_z(x) = clamp((R + z - x) / R, 0, 1) "
                       "(Sukhbaatar et al. 2019); keys beyond z + R never visited, penalty() = lambda * mean z",
                       [](const AttentionConfig& c) { return std::make_unique<AdaptiveSpanAttention>(c); });

AdaptiveSpanAttention::AdaptiveSpanAttention(const AttentionConfig& config) : heads_(config.heads) {
  const AttentionOptions& o = config.options;
  max_span_ = o.get_int("max_span", 256, IntRange::at_least(1));  // positions
  ramp_ = o.get_double("ramp", 32.0, RealRange::above(0));          // positions
  const double init = o.get_double("init", 0.0, RealRange::closed(0, double(max_span_)));
  lambda_ = o.get_double("penalty", 2e-6, RealRange::at_least(0));
  scale_ = o.get_double("scale", 0.0, RealRange::above(0));  // 0: 1/sqrt(D)
  const std::string impl = o.get_string("impl", "tiled");
  ENG_CHECK(impl == "tiled" || impl == "reference", "attention 'adaptive-span': option impl must be tiled or "
            "reference, got '", impl, "'");
  reference_ = impl == "reference";
  ENG_CHECK(heads_ >= 1, "attention 'adaptive-span': needs heads >= 1, got ", heads_);
  span_ = register_parameter("span", full({heads_}, init / double(max_span_)));
  accepts_.query_offset = accepts_.cross = true;
  accepts_.why_not = "the span mask is the only logits term";
}

Tensor AdaptiveSpanAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  ENG_CHECK(q.size(1) == heads_, "attention 'adaptive-span': built for ", heads_, " heads, got q ", q.shape());
  const Tensor s = span_.to(q.dtype());
  // clamp(s, 0, 1) in value, s in gradient (straight through)
  const Tensor clamped = add(s, sub(clamp(s, 0.0, 1.0), s).detach());
  const Tensor z = mul_scalar(clamped, double(max_span_));
  const double scale = scale_ > 0 ? scale_ : 1.0 / std::sqrt(double(q.size(3)));
  return adaptive_span_attention(q, k, v, z, mask, scale, ramp_, reference_);
}

Tensor AdaptiveSpanAttention::penalty() const {
  return mul_scalar(mean(clamp(span_, 0.0, 1.0)), lambda_ * double(max_span_));
}

std::vector<double> AdaptiveSpanAttention::spans() const {
  std::vector<double> z = span_.to_vector();
  for (double& x : z) x = std::min(std::max(x, 0.0), 1.0) * double(max_span_);
  return z;
}

int64_t AdaptiveSpanAttention::cache_positions() const { return int64_t(std::ceil(double(max_span_) + ramp_)); }

std::unique_ptr<AttentionState> AdaptiveSpanAttention::new_state() const {
  return std::make_unique<AdaptiveSpanState>();
}

namespace {

// Slots [from, from + n) of a cache buffer, read in place.
Tensor slots(const Tensor& buf, int64_t from, int64_t n) {
  return buf.as_strided({buf.size(0), buf.size(1), n, buf.size(3)}, buf.strides(),
                        buf.offset() + from * buf.strides()[2]);
}

// A buffer of `capacity` slots holding slots [from, from + n) of `old` (if any) at its start.
Tensor regrow(const Tensor& old, const Tensor& like, int64_t capacity, int64_t from, int64_t n) {
  Tensor buf = empty({like.size(0), like.size(1), capacity, like.size(3)}, like.dtype());
  if (n > 0) slots(buf, 0, n).copy_from(slots(old, from, n));
  return buf;
}

}  // namespace

Tensor AdaptiveSpanAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                          const AttentionMask&) {
  auto* st = dynamic_cast<AdaptiveSpanState*>(&state);
  ENG_CHECK(st, "attention 'adaptive-span' step: the state was not made by this variant's new_state()");
  const int64_t t = st->length;  // this position; the caller advances length afterwards
  ENG_CHECK(t == st->start + st->stored, "attention 'adaptive-span' step: state.length is ", t, " but the cache ends at position ",
            st->start + st->stored, " (advance length by one after each step)");
  if (st->k.defined())
    ENG_CHECK(k.size(0) == st->k.size(0) && k.size(1) == st->k.size(1) && k.size(3) == st->k.size(3) &&
                  v.size(3) == st->v.size(3) && k.dtype() == st->k.dtype(),
              "attention 'adaptive-span' step: k ", k.shape(), " and v ", v.shape(), " do not match the cache of keys ",
              st->k.shape(), " and values ", st->v.shape());
  // Keys further back than ceil(S + R) - 1 have m = 0 for every z in [0, S]: keep `keep` positions, in a buffer of
  // twice that, so that sliding them back to the front costs O(keep) once every `keep` tokens.
  const int64_t keep = cache_positions(), most = 2 * keep;
  if (st->stored == st->capacity()) {
    if (st->capacity() < most) {
      const int64_t capacity = std::min(most, std::max<int64_t>(16, 2 * st->capacity()));
      st->k = regrow(st->k, k, capacity, 0, st->stored);
      st->v = regrow(st->v, v, capacity, 0, st->stored);
    } else {
      const int64_t kept = keep - 1, drop = st->stored - kept;  // the new position makes `keep`
      slots(st->k, 0, kept).copy_from(slots(st->k, drop, kept));
      slots(st->v, 0, kept).copy_from(slots(st->v, drop, kept));
      st->start += drop;
      st->stored = kept;
    }
  }
  slots(st->k, st->stored, 1).copy_from(k);
  slots(st->v, st->stored, 1).copy_from(v);
  st->stored++;
  AttentionMask m;
  m.causal = true;
  m.query_offset = t - st->start;  // distances t - position, as in the parallel form
  return forward(q, slots(st->k, 0, st->stored), slots(st->v, 0, st->stored), m);
}

}  // namespace eng
