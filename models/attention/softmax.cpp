#include "models/attention/softmax.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "ops/attention_flash.h"
#include "ops/attention_naive.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(softmax, "softmax", "softmax attention (Vaswani et al. 2017); flash kernel, impl=naive for the reference",
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

std::pair<Tensor, Tensor> kv_cache_append(KVCacheState& cache, const Tensor& k, const Tensor& v, const std::string& who) {
  const int64_t t = cache.length;  // this position; the caller advances length afterwards
  ENG_CHECK(t >= 0 && t <= cache.stored, who, " step: state.length is ", t, " but the cache holds ", cache.stored,
            " positions (advance length by one after each step)");
  if (cache.v.defined()) {
    const Tensor& cv = cache.v;
    ENG_CHECK(v.size(0) == cv.size(0) && v.size(1) == cv.size(1) && v.size(3) == cv.size(3) && v.dtype() == cv.dtype() &&
                  k.defined() == cache.k.defined() && (!k.defined() || k.size(3) == cache.k.size(3)),
              who, " step: k ", k.defined() ? k.shape() : Shape{}, " and v ", v.shape(), " do not match the cache of keys ",
              cache.k.defined() ? cache.k.shape() : Shape{}, " and values ", cv.shape());
  }
  if (t == cache.capacity()) {
    const int64_t capacity = std::max<int64_t>(16, 2 * t);
    if (k.defined()) cache.k = grow(cache.k, k, capacity, t);
    cache.v = grow(cache.v, v, capacity, t);
  }
  auto write = [t](const Tensor& buf, const Tensor& x) {
    buf.as_strided(x.shape(), buf.strides(), buf.offset() + t * buf.strides()[2]).copy_from(x);
  };
  if (k.defined()) write(cache.k, k);
  write(cache.v, v);
  cache.stored = t + 1;
  return {k.defined() ? cache_view(cache.k, t + 1) : Tensor(), cache_view(cache.v, t + 1)};
}

Tensor kv_cache_step(Attention& a, const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask, bool keys) {
  const std::string who = "attention '" + a.name() + "'";
  auto* cache = tag_cast<KVCacheState>(&state);
  ENG_CHECK(cache, who, " step: the state was not made by this variant's new_state()");
  const auto [ck, cv] = kv_cache_append(*cache, keys ? k : Tensor(), v, who);
  const int64_t B = q.size(0), H = q.size(1), L = cv.size(2);
  AttentionMask m = mask;
  m.causal = true;
  m.query_offset = cache->length;
  const Tensor all_k = keys ? repeat_heads(ck, H) : expand(narrow(k, 1, 0, 1), {B, H, L, k.size(3)});
  return a.forward(q, all_k, repeat_heads(cv, H), m);
}

Tensor SoftmaxAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                     const AttentionMask& mask) {
  return kv_cache_step(*this, q, k, v, state, mask);
}

}  // namespace eng
