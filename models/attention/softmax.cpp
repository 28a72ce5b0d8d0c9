#include "models/attention/softmax.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "ops/attention_flash.h"
#include "ops/attention_naive.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION("softmax", "softmax attention (Vaswani et al. 2017); flash kernel, impl=naive for the reference",
                       [](const AttentionConfig& c) { return std::make_unique<SoftmaxAttention>(c); });

SoftmaxAttention::SoftmaxAttention(const AttentionConfig& config) {
  const std::string impl = config.options.get_string("impl", "auto");
  ENG_CHECK(impl == "auto" || impl == "flash" || impl == "naive",
            "attention 'softmax': option impl must be auto, flash or naive, got '", impl, "'");
  naive_ = impl == "naive";
  accepts_.keep = accepts_.bias = accepts_.alibi = accepts_.query_offset = accepts_.cross = true;
  accepts_.grouped_step = true;
  accepts_.cuda = !naive_;  // the flash kernel has a CUDA form
  scale_ = config.options.get_double("scale", 0.0, RealRange::above(0));  // 0: 1/sqrt(D)
}

double SoftmaxAttention::scale(int64_t head_dim) const { return scale_ > 0 ? scale_ : 1.0 / std::sqrt(double(head_dim)); }

Tensor SoftmaxAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const double s = scale(q.size(3));
  return naive_ ? naive_attention(q, k, v, mask, s) : flash_attention(q, k, v, mask, s);
}

std::unique_ptr<AttentionState> SoftmaxAttention::new_state() const { return std::make_unique<KVCacheState>(); }

namespace {

// Positions [0, length) of a cache buffer, read in place.
Tensor cache_view(const Tensor& buf, int64_t length) {
  return buf.as_strided({buf.size(0), buf.size(1), length, buf.size(3)}, buf.strides(), buf.offset());
}

// A buffer of `capacity` positions holding the first `length` positions of `old` (if any).
Tensor grow(const Tensor& old, const Tensor& like, int64_t capacity, int64_t length) {
  Tensor buf = empty_on({like.size(0), like.size(1), capacity, like.size(3)}, like.dtype(), like.device());
  if (length > 0) cache_view(buf, length).copy_from(cache_view(old, length));
  return buf;
}

}  // namespace

Tensor SoftmaxAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                     const AttentionMask& mask) {
  auto* cache = dynamic_cast<KVCacheState*>(&state);
  ENG_CHECK(cache, "attention 'softmax' step: the state was not made by this variant's new_state()");
  const int64_t t = cache->length;  // this position; the caller advances length afterwards
  ENG_CHECK(t >= 0 && t <= cache->stored, "attention 'softmax' step: state.length is ", t, " but the cache holds ", cache->stored,
            " positions (advance length by one after each step)");
  if (cache->k.defined()) {
    const Tensor& ck = cache->k;
    const Tensor& cv = cache->v;
    ENG_CHECK(k.size(0) == ck.size(0) && k.size(1) == ck.size(1) && k.size(3) == ck.size(3) &&
                  v.size(3) == cv.size(3) && k.dtype() == ck.dtype(),
              "attention 'softmax' step: k ", k.shape(), " and v ", v.shape(), " do not match the cache of keys ", ck.shape(),
              " and values ", cv.shape());
  }
  if (t == cache->capacity()) {
    const int64_t capacity = std::max<int64_t>(16, 2 * t);
    cache->k = grow(cache->k, k, capacity, t);
    cache->v = grow(cache->v, v, capacity, t);
  }
  const Tensor& ck = cache->k;
  const Tensor& cv = cache->v;
  ck.as_strided(k.shape(), ck.strides(), ck.offset() + t * ck.strides()[2]).copy_from(k);
  cv.as_strided(v.shape(), cv.strides(), cv.offset() + t * cv.strides()[2]).copy_from(v);
  AttentionMask m = mask;
  m.causal = true;
  m.query_offset = t;
  cache->stored = t + 1;
  return forward(q, repeat_heads(cache_view(ck, t + 1), q.size(1)), repeat_heads(cache_view(cv, t + 1), q.size(1)), m);
}

}  // namespace eng
