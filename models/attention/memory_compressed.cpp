#include "models/attention/memory_compressed.h"

#include <cmath>
#include <vector>

#include "engine/error.h"
#include "ops/attention_flash.h"
#include "ops/index.h"
#include "ops/matmul.h"
#include "ops/select.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(memory_compressed, "memory-compressed",
                       "memory-compressed attention (Liu et al. 2018): keys and values shortened by a learned strided "
                       "convolution (compress=c), O(N^2/c)",
                       [](const AttentionConfig& c) { return std::make_unique<MemoryCompressedAttention>(c); });

namespace {

// [H, c·d, d]: c stacked identities over c, the mean of the block's rows.
Tensor mean_pool_weight(int64_t heads, int64_t c, int64_t d) {
  std::vector<double> w(size_t(heads * c * d * d), 0.0);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t r = 0; r < c; ++r)
      for (int64_t i = 0; i < d; ++i) w[size_t(((h * c + r) * d + i) * d + i)] = 1.0 / double(c);
  return from_vector(w, {heads, c * d, d}, DType::F32);
}

}  // namespace

MemoryCompressedAttention::MemoryCompressedAttention(const AttentionConfig& config)
    : c_(config.options.get_int("compress", 3, IntRange::at_least(1))),
      heads_(config.heads),
      head_dim_(config.head_dim),
      causal_(config.causal) {
  accepts_.cross = !causal_;  // a causal model is causal under any mask
  accepts_.grouped_step = true;
  accepts_.why_not = causal_ ? "built causal, it is causal under any mask; keep, bias and ALiBi index keys that the "
                               "convolution replaces by compressed slots, and causal queries start at position 0"
                             : "keep, bias and ALiBi index keys that the convolution replaces by compressed slots, and "
                               "causal queries start at position 0";
  wk_ = register_parameter("wk", mean_pool_weight(heads_, c_, head_dim_));
  wv_ = register_parameter("wv", mean_pool_weight(heads_, c_, head_dim_));
}

// x [B, H, N, d] -> [B, H, ceil(N / c), d]: rows past each batch element's length zeroed, N padded with zero
// rows to a multiple of c, each block of c rows flattened and multiplied by its head's w [c·d, d].
Tensor MemoryCompressedAttention::compress_rows(const Tensor& x, const Tensor& w,
                                                const std::vector<int64_t>& lengths) const {
  const int64_t B = x.size(0), H = x.size(1), N = x.size(2), d = x.size(3), M = (N + c_ - 1) / c_;
  Tensor rows = x;
  if (!lengths.empty()) {
    rows = masked_fill(x, padded_keys(lengths, N, true), 0.0);
  }
  if (M * c_ > N) rows = concat({rows, zeros({B, H, M * c_ - N, d}, x.dtype())}, 2);
  return matmul(reshape(rows, {B, H, M, c_ * d}), w.to(x.dtype()));
}

Tensor MemoryCompressedAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2);
  check_attention_mask(mask, B, H, Lq, Lk, q.dtype(), "attention 'memory-compressed'");
  ENG_CHECK(H == heads_ && q.size(3) == head_dim_ && v.size(3) == head_dim_, "attention 'memory-compressed': built "
            "for ", heads_, " heads of dim ", head_dim_, ", got q ", q.shape(), " and v ", v.shape());
  const bool causal = causal_ || mask.causal;
  // A causal mask's offset is refused before this; a causal model is causal under any mask, so checks it here.
  ENG_CHECK(!causal || mask.query_offset == 0, "attention 'memory-compressed': causal masking needs its queries from "
            "position 0, got query_offset ", mask.query_offset);
  const Tensor kc = compress_rows(k, wk_, mask.key_lengths), vc = compress_rows(v, wv_, mask.key_lengths);
  AttentionMask slots;
  for (int64_t len : mask.key_lengths) slots.key_lengths.push_back((len + c_ - 1) / c_);
  const double scale = 1.0 / std::sqrt(double(q.size(3)));
  if (!causal) return flash_attention(q, kc, vc, slots, scale);

  // Query i = t·c + r sees slots b <= t when r = c − 1 (its block is complete) and b <= t − 1 otherwise: one
  // causal flash call per residue r, with query_offset 0 or −1, then the rows interleaved back.
  const int64_t M = (Lq + c_ - 1) / c_, Dv = v.size(3);
  std::vector<Tensor> parts;
  for (int64_t r = 0; r < c_; ++r) {
    AttentionMask m = slots;
    m.causal = true;
    m.query_offset = r == c_ - 1 ? 0 : -1;
    Tensor o = r < Lq ? flash_attention(slice(q, 2, r, Lq, c_), kc, vc, m, scale) : zeros({B, H, 0, Dv}, q.dtype());
    if (o.size(2) < M) o = concat({o, zeros({B, H, M - o.size(2), Dv}, q.dtype())}, 2);
    parts.push_back(unsqueeze(o, 3));
  }
  return narrow(reshape(concat(parts, 3), {B, H, M * c_, Dv}), 2, 0, Lq);
}

std::unique_ptr<AttentionState> MemoryCompressedAttention::new_state() const {
  return std::make_unique<MemoryCompressedState>();
}

Tensor MemoryCompressedAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                              const AttentionMask&) {
  auto* st = dynamic_cast<MemoryCompressedState*>(&state);
  ENG_CHECK(st, "attention 'memory-compressed' step: the state was not made by this variant's new_state()");
  const int64_t B = q.size(0), H = q.size(1), G = k.size(1), D = k.size(3), Dv = v.size(3);
  ENG_CHECK(H == heads_ && D == head_dim_ && Dv == head_dim_, "attention 'memory-compressed' step: built for ", heads_,
            " heads of dim ", head_dim_, ", got q ", q.shape(), " and v ", v.shape());
  ENG_CHECK(st->length == st->absorbed(), "attention 'memory-compressed' step: state.length is ", st->length,
            " but the state holds ", st->absorbed(), " positions (advance length by one after each step)");
  if (!st->open_k.defined()) {
    st->open_k = zeros({B, G, c_, D}, k.dtype());
    st->open_v = zeros({B, G, c_, Dv}, v.dtype());
  }
  ENG_CHECK(k.shape() == Shape({st->open_k.size(0), st->open_k.size(1), 1, D}) && k.dtype() == st->open_k.dtype(),
            "attention 'memory-compressed' step: k ", k.shape(), " does not match the open block ", st->open_k.shape());
  narrow(st->open_k, 2, st->open, 1).copy_from(k);
  narrow(st->open_v, 2, st->open, 1).copy_from(v);
  if (++st->open == c_) {  // the block is complete: its slot becomes visible from this query on
    auto slot = [&](const Tensor& rows, const Tensor& w) {
      return matmul(reshape(repeat_heads(rows, H), {B, H, 1, c_ * D}), w.to(rows.dtype()));
    };
    st->slots.length = st->slots.stored;
    kv_cache_append(st->slots, slot(st->open_k, wk_), slot(st->open_v, wv_), "attention 'memory-compressed'");
    st->open = 0;
  }
  const int64_t n = st->slots.stored;
  if (n == 0) return zeros({B, H, 1, Dv}, q.dtype());  // no complete block yet: the parallel form's zeros
  auto visible = [n](const Tensor& buf) { return narrow(buf, 2, 0, n); };
  return flash_attention(q, visible(st->slots.k), visible(st->slots.v), AttentionMask{},
                         1.0 / std::sqrt(double(q.size(3))));
}

}  // namespace eng
