// Multi-head attention layer: Q/K/V/output projections around a pluggable attention mechanism
// (models/attention/attention.h, chosen by name). Rotary encodings are applied to q and k here and
// ALiBi slopes handed to the mechanism, both at absolute positions (offset by the cached length when
// generating). Transformer-XL's relative encoding (models/relative_position.h) hands the mechanism q + u
// and its position term as mask.bias. Dropout applies to the layer's output (the mechanisms have no
// dropout on probabilities).
//
// Grouped-query attention (Ainslie et al. 2023; multi-query, Shazeer 2019, is kv_heads = 1): k_proj and
// v_proj output kv_heads·head_dim, and query head h reads K/V group h / (heads / kv_heads). The mechanism
// still sees k and v with `heads` heads: the groups are expanded along the head axis (a stride-0 view for
// kv_heads = 1, one copy of the projected k and v for 1 < kv_heads < heads), so every variant works
// unchanged. In generation, a mechanism whose accepts().grouped_step is set (softmax's KV cache) takes the groups as they are
// and caches kv_heads heads, not heads. docs/attention/grouped_query.md.
#pragma once
#include <memory>
#include <string>

#include "models/attention/attention.h"
#include "models/dropout_layer.h"
#include "models/linear.h"
#include "models/positional.h"
#include "models/relative_position.h"
#include "ops/rope.h"

namespace eng {

struct MultiHeadConfig {
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t kv_heads = 0;  // K/V heads: 0 = heads (plain multi-head), 1 = multi-query, else grouped-query
  std::string attention = "softmax";
  AttentionOptions options;
  int64_t max_len = 0;
  bool causal = false;
  double dropout = 0.0;
  PositionalKind positional = PositionalKind::None;  // only rotary, alibi and relative act here
  double rope_theta = 10000;  // rotary's base and pairing (ops/rope.h)
  RopePairing rope_pairing = RopePairing::RotateHalf;
  bool bias = true;  // biases of the four projections
  uint64_t seed = 0;
};

// Projected keys and values of a fixed memory (the encoder output), computed once for cross-attention.
struct KVMemory {
  Tensor k, v;  // [B, H, Lm, Dh]
  std::vector<int64_t> key_lengths;
  std::shared_ptr<AttentionState> digest;  // the mechanism's digest of k and v (linear: s and z), if it has one
};

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(const MultiHeadConfig& cfg, Rng& rng);

  // x_q [B, Lq, d_model], x_kv [B, Lk, d_model] (self-attention: pass x_q twice). mask.causal, key_lengths,
  // keep and bias are forwarded to the mechanism; alibi slopes and the relative position bias are filled in
  // here. mask.query_offset is the absolute position of query 0 among the keys (a Transformer-XL memory of
  // M positions before the segment: x_kv = [memory, x_q] and query_offset = M).
  Tensor forward(const Tensor& x_q, const Tensor& x_kv, AttentionMask mask) const;

  // Generation: one new position x_t [B, 1, d_model] of a causal self-attention layer.
  std::unique_ptr<AttentionState> new_state() const;
  Tensor step(const Tensor& x_t, AttentionState& state) const;

  // Cross-attention over a fixed memory, for generation without re-projecting it every step.
  KVMemory project_memory(const Tensor& memory, std::vector<int64_t> key_lengths) const;
  Tensor attend_memory(const Tensor& x_q, const KVMemory& mem) const;

  const Attention& mechanism() const { return *attn_; }

  Linear q_proj, k_proj, v_proj, out_proj;

 private:
  Tensor split_heads(const Tensor& x, int64_t heads) const;  // [B, L, heads·Dh] -> [B, heads, L, Dh]
  Tensor expand_groups(const Tensor& kv) const;               // [B, G, L, Dh] -> [B, H, L, Dh]
  Tensor merge_heads(const Tensor& x) const;  // [B, H, L, Dh] -> [B, L, d]
  // q, k and v of one position [B, 1, ·]: one product against the three weights stacked where generation's packed
  // weights serve it (ops/matmul.h, linear_stacked), else the three projections.
  std::vector<Tensor> project_step(const Tensor& x_t) const;
  // Relative positions: puts the position term of queries q [B, H, Lq, Dh] against Lk keys into mask.bias
  // and returns the content queries q + u.
  Tensor add_relative_position(const Tensor& q, int64_t Lk, AttentionMask& mask) const;
  Tensor finish(const Tensor& heads_out) const;
  MultiHeadConfig cfg_;
  int64_t head_dim_;
  int64_t kv_heads_;  // resolved: heads when the config says 0
  std::unique_ptr<Attention> attn_;
  Dropout drop_;
  Tensor alibi_;
  std::unique_ptr<RelativePosition> relative_;  // positional = relative only
};

}  // namespace eng
