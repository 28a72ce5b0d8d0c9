#include "models/multihead.h"

#include "engine/error.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/rope.h"
#include "ops/view.h"

namespace eng {

namespace {

// `stream` tells layers apart: each mechanism gets its own seed (random projections and hashes must not be
// shared by every layer), derived from the model seed without consuming a draw of the weights' generator.
AttentionConfig mechanism_config(const MultiHeadConfig& c, uint64_t stream) {
  ENG_CHECK(c.heads >= 1 && c.d_model % c.heads == 0, "MultiHeadAttention: d_model ", c.d_model,
            " is not divisible by heads ", c.heads);
  AttentionConfig a;
  a.heads = c.heads;
  a.head_dim = c.d_model / c.heads;
  a.max_len = c.max_len;
  a.causal = c.causal;
  a.seed = c.seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  a.options = c.options;
  return a;
}

// Width of the k and v projections: kv_heads · head_dim (d_model for plain multi-head attention).
int64_t kv_width(const MultiHeadConfig& c) {
  ENG_CHECK(c.heads >= 1 && c.d_model % c.heads == 0, "MultiHeadAttention: d_model ", c.d_model,
            " is not divisible by heads ", c.heads);
  const int64_t g = c.kv_heads == 0 ? c.heads : c.kv_heads;
  ENG_CHECK(g >= 1 && g <= c.heads && c.heads % g == 0, "MultiHeadAttention: kv_heads ", c.kv_heads,
            " must divide heads ", c.heads, " (0 = heads, 1 = multi-query)");
  return g * (c.d_model / c.heads);
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(const MultiHeadConfig& cfg, Rng& rng)
    : q_proj(cfg.d_model, cfg.d_model, rng, cfg.bias),
      k_proj(cfg.d_model, kv_width(cfg), rng, cfg.bias),
      v_proj(cfg.d_model, kv_width(cfg), rng, cfg.bias),
      out_proj(cfg.d_model, cfg.d_model, rng, cfg.bias),
      cfg_(cfg),
      head_dim_(cfg.d_model / std::max<int64_t>(cfg.heads, 1)),
      kv_heads_(cfg.kv_heads == 0 ? cfg.heads : cfg.kv_heads),
      attn_(make_attention(cfg.attention, mechanism_config(cfg, rng.position()))),
      drop_(cfg.dropout, rng) {
  ENG_CHECK(cfg.positional != PositionalKind::Rotary || head_dim_ % 2 == 0,
            "MultiHeadAttention: rotary encoding needs an even head dim, got ", head_dim_);
  register_module("q_proj", q_proj);
  register_module("k_proj", k_proj);
  register_module("v_proj", v_proj);
  register_module("out_proj", out_proj);
  register_module("attention", *attn_);
  register_module("dropout", drop_);
  if (cfg.positional == PositionalKind::Alibi) alibi_ = alibi_slopes(cfg.heads);
  if (cfg.positional == PositionalKind::Relative) {
    ENG_CHECK(attn_->accepts().bias, "MultiHeadAttention: positional 'relative' adds its position term to the "
              "logits as mask.bias, which attention '", cfg.attention, "' does not take");
    relative_ = std::make_unique<RelativePosition>(cfg.d_model, cfg.heads, rng);
    register_module("relative", *relative_);
  }
}

Tensor MultiHeadAttention::split_heads(const Tensor& x, int64_t heads) const {
  ENG_CHECK(x.dim() == 3 && x.size(2) == heads * head_dim_, "MultiHeadAttention: input must be [B, L, ",
            heads * head_dim_, "], got ", x.shape());
  return transpose(reshape(x, {x.size(0), x.size(1), heads, head_dim_}), 1, 2);
}

Tensor MultiHeadAttention::expand_groups(const Tensor& kv) const { return repeat_heads(kv, cfg_.heads); }

Tensor MultiHeadAttention::merge_heads(const Tensor& x) const {
  Tensor t = transpose(x, 1, 2);  // [B, L, H, Dh]
  return reshape(t, {t.size(0), t.size(1), cfg_.d_model});
}

Tensor MultiHeadAttention::add_relative_position(const Tensor& q, int64_t Lk, AttentionMask& mask) const {
  const Tensor pos = relative_->position_bias(q, Lk, mask.query_offset);
  mask.bias = mask.bias.defined() ? add(mask.bias, pos) : pos;
  return relative_->content_queries(q);
}

Tensor MultiHeadAttention::finish(const Tensor& heads_out) const {
  return drop_.forward(out_proj.forward(merge_heads(heads_out)));
}

Tensor MultiHeadAttention::forward(const Tensor& x_q, const Tensor& x_kv, AttentionMask mask) const {
  Tensor q = split_heads(q_proj.forward(x_q), cfg_.heads);
  Tensor k = split_heads(k_proj.forward(x_kv), kv_heads_);
  Tensor v = split_heads(v_proj.forward(x_kv), kv_heads_);
  if (cfg_.positional == PositionalKind::Rotary) {  // on the G groups, before expanding: the same per head
    q = rope(q, mask.query_offset, cfg_.rope_theta, cfg_.rope_pairing);
    k = rope(k, 0, cfg_.rope_theta, cfg_.rope_pairing);
  }
  if (alibi_.defined()) mask.alibi_slopes = alibi_.dtype() == q.dtype() ? alibi_ : alibi_.to(q.dtype());
  if (relative_) q = add_relative_position(q, k.size(2), mask);
  return finish(attn_->forward(q, expand_groups(k), expand_groups(v), mask));
}

std::unique_ptr<AttentionState> MultiHeadAttention::new_state() const {
  auto s = attn_->new_state();
  const std::string& why = attn_->accepts().no_step;
  ENG_CHECK(s != nullptr, "MultiHeadAttention: attention '", attn_->name(), "' has no recurrent form for generation",
            why.empty() ? "" : ": " + why);
  return s;
}

std::vector<Tensor> MultiHeadAttention::project_step(const Tensor& x_t) const {
  std::vector<Tensor> qkv = linear_stacked(x_t, {q_proj.weight, k_proj.weight, v_proj.weight},
                                           {q_proj.bias, k_proj.bias, v_proj.bias});
  if (qkv.empty()) qkv = {q_proj.forward(x_t), k_proj.forward(x_t), v_proj.forward(x_t)};
  return qkv;
}

Tensor MultiHeadAttention::step(const Tensor& x_t, AttentionState& state) const {
  ENG_CHECK(x_t.dim() == 3 && x_t.size(1) == 1, "MultiHeadAttention::step: input must be [B, 1, d_model], got ",
            x_t.shape());
  const std::vector<Tensor> qkv = project_step(x_t);
  Tensor q = split_heads(qkv[0], cfg_.heads);
  Tensor k = split_heads(qkv[1], kv_heads_);
  Tensor v = split_heads(qkv[2], kv_heads_);
  if (cfg_.positional == PositionalKind::Rotary) {
    q = rope(q, state.length, cfg_.rope_theta, cfg_.rope_pairing);
    k = rope(k, state.length, cfg_.rope_theta, cfg_.rope_pairing);
  }
  AttentionMask mask;
  mask.causal = true;
  mask.query_offset = state.length;
  if (alibi_.defined()) mask.alibi_slopes = alibi_.dtype() == q.dtype() ? alibi_ : alibi_.to(q.dtype());
  if (relative_) q = add_relative_position(q, state.length + 1, mask);
  // A mechanism whose step keeps a state per K/V group (softmax's KV cache) gets the G groups: its cache is
  // G/H the size of a multi-head one. The others get k and v expanded to H heads.
  const bool grouped = attn_->accepts().grouped_step;
  Tensor o = attn_->step(q, grouped ? k : expand_groups(k), grouped ? v : expand_groups(v), state, mask);
  state.length++;  // mechanisms only absorb k and v; the layer owns the position count
  return finish(o);
}

KVMemory MultiHeadAttention::project_memory(const Tensor& memory, std::vector<int64_t> key_lengths) const {
  KVMemory mem{expand_groups(split_heads(k_proj.forward(memory), kv_heads_)),
               expand_groups(split_heads(v_proj.forward(memory), kv_heads_)), std::move(key_lengths), {}};
  AttentionMask mask;
  mask.key_lengths = mem.key_lengths;
  mem.digest = attn_->memory_state(mem.k, mem.v, mask);
  return mem;
}

Tensor MultiHeadAttention::attend_memory(const Tensor& x_q, const KVMemory& mem) const {
  Tensor q = split_heads(q_proj.forward(x_q), cfg_.heads);
  if (mem.digest) return finish(attn_->attend_state(q, *mem.digest));
  AttentionMask mask;
  mask.key_lengths = mem.key_lengths;
  return finish(attn_->forward(q, mem.k, mem.v, mask));
}

}  // namespace eng
