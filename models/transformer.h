// Transformer blocks and whole models, built from one config.
//
//   post-norm (Vaswani et al. 2017):  x = norm(x + sublayer(x))
//   pre-norm  (Xiong et al. 2020):    x = x + sublayer(norm(x)),  and a final norm after the stack
//
// Initialisation: Linear layers as PyTorch's nn.Linear (U(±1/sqrt(fan_in))), norms weight 1 / bias 0,
// token embeddings N(0, 1/d_model) multiplied by embed_scale in the forward (by default sqrt(d_model), Vaswani
// §3.4, so the input has unit scale like the sinusoidal table), learned positions N(0, 0.02).
// docs/model.md writes out every formula the models compute. One generator per
// model draws the initial weights and then the dropout masks; checkpoints save its position.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/embedding.h"
#include "models/feed_forward.h"
#include "models/multihead.h"
#include "models/norm_layers.h"
#include "models/positional.h"
#include "models/xl_memory.h"
#include "ops/weight_panels.h"

namespace eng {

struct TransformerConfig {
  int64_t vocab = 16;        // token vocabulary (shared by source and target)
  // Width of the language model's output head: 0 = vocab (logits of a softmax over tokens); else, e.g., the 3K
  // parameters of a discretised mixture of K logistics per position (ops/dmol.h).
  int64_t outputs = 0;
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t kv_heads = 0;      // K/V heads of every attention layer: 0 = heads (MHA), 1 = MQA, else GQA
  int64_t d_ff = 256;
  int64_t encoder_layers = 0;  // 0: decoder-only model
  int64_t decoder_layers = 2;  // 0 with encoder_layers > 0: encoder-only model
  int64_t max_len = 512;
  double dropout = 0.0;
  std::string attention = "softmax";       // the decoder's (or encoder-only model's) self-attention
  AttentionOptions attention_options;
  std::string cross_attention = "softmax";  // the decoder's attention over the encoder output
  bool pre_norm = true;
  bool rms_norm = false;
  // Reversible residual layers (Reformer §3, models/reversible.h): activation memory independent of depth.
  // Decoder-only / encoder-only models with pre-norm only.
  bool reversible = false;
  // Transformer-XL memory (models/xl_memory.h): positions of earlier segments each layer keeps attending to,
  // 0 = off. Decoder-only, not reversible, positions not added to the embeddings.
  int64_t mem_len = 0;
  PositionalKind positional = PositionalKind::Sinusoidal;
  Activation activation = Activation::Gelu;
  // Biases of every Linear layer (attention projections, feed-forward, output head); norms keep theirs.
  bool bias = true;
  // Decoder-only / encoder-only models: the output head is the token embedding matrix (logits = x Eᵀ, no bias)
  // instead of a Linear layer of its own (Press & Wolf 2017; GPT-2).
  bool tie_embeddings = false;
  double embed_scale = 0;  // token embeddings are multiplied by it; 0 = sqrt(d_model)
  double rope_theta = 10000;  // rotary: the base of the angles (ops/rope.h)
  RopePairing rope_pairing = RopePairing::RotateHalf;
  double norm_eps = 0;  // the norms' epsilon; 0 = the norm's own default (LayerNorm 1e-5, RMSNorm 1e-6)
  uint64_t seed = 1;

  // Throws naming the first field that cannot be built (e.g. d_model not divisible by heads).
  void validate() const;
  // key=value pairs (checkpoint metadata), and back; unknown keys or bad values are errors.
  std::map<std::string, std::string> to_map() const;
  static TransformerConfig from_map(const std::map<std::string, std::string>& m);
};

// LayerNorm or RMSNorm, as the config says.
class Norm : public Module {
 public:
  Norm(int64_t dim, bool rms, double eps = 0);  // eps 0: LayerNorm's 1e-5 or RMSNorm's 1e-6
  Tensor forward(const Tensor& x) const;
  AddNormResult forward_add(const Tensor& x, const Tensor& h) const;  // x + h and its norm in one pass
  const LayerNorm* layer_norm() const { return ln_.get(); }  // null for RMSNorm
  const RMSNorm* rms_norm() const { return rms_.get(); }     // null for LayerNorm

 private:
  std::unique_ptr<LayerNorm> ln_;
  std::unique_ptr<RMSNorm> rms_;
};

class EncoderLayer : public Module {
 public:
  EncoderLayer(const TransformerConfig& c, bool causal, const std::string& attention, Rng& rng);
  // `memory` [B, M, d_model] (Transformer-XL, models/xl_memory.h): earlier inputs of this layer that the
  // self-attention also takes keys and values from, before x's own; mask.query_offset must then be M.
  Tensor forward(const Tensor& x, const AttentionMask& mask, const Tensor& memory = Tensor()) const;
  std::unique_ptr<AttentionState> new_state() const { return self_attn.new_state(); }
  Tensor step(const Tensor& x_t, AttentionState& state) const;
  // The two pre-norm sub-layers without their residual add, for the reversible stack (models/reversible.h):
  // F(x) = dropout(attention(norm1(x))), its recurrent form, and G(x) = dropout(ffn(norm2(x))).
  Tensor attention_branch(const Tensor& x, const AttentionMask& mask) const;
  Tensor attention_step_branch(const Tensor& x_t, AttentionState& state) const;
  Tensor ffn_branch(const Tensor& x) const;

  MultiHeadAttention self_attn;
  FeedForward ffn;
  Norm norm1, norm2;

 private:
  bool pre_norm_;
  Dropout drop_;
};

class DecoderLayer : public Module {
 public:
  DecoderLayer(const TransformerConfig& c, Rng& rng);
  Tensor forward(const Tensor& x, const Tensor& memory, const AttentionMask& self_mask,
                 const std::vector<int64_t>& memory_lengths) const;
  std::unique_ptr<AttentionState> new_state() const { return self_attn.new_state(); }
  Tensor step(const Tensor& x_t, AttentionState& state, const KVMemory& memory) const;

  MultiHeadAttention self_attn, cross_attn;
  FeedForward ffn;
  Norm norm1, norm2, norm3;

 private:
  bool pre_norm_;
  Dropout drop_;
};

// Token + position embedding at the input of a stack.
class TokenEmbedding : public Module {
 public:
  TokenEmbedding(const TransformerConfig& c, Rng& rng);
  Tensor forward(const Tensor& ids, int64_t offset = 0) const;  // ids [B, L] -> [B, L, d_model]

  const LearnedPositional* learned() const { return learned_.get(); }  // null unless positions are learned
  Embedding tokens;

 private:
  TransformerConfig cfg_;
  std::unique_ptr<LearnedPositional> learned_;
  Dropout drop_;
};

// The sum of the layers' attention loss terms (Attention::penalty, e.g. adaptive-span's span penalty), undefined
// when no layer has one.
Tensor attention_penalty(const std::vector<std::unique_ptr<EncoderLayer>>& layers);

// Decoder-only language model (causal), or encoder-only (bidirectional) when built with causal = false.
class LanguageModel : public Module {
  TransformerConfig cfg_;  // declared first: the layers below are built from them
  mutable Rng rng_;  // const forward passes draw dropout masks from it (and the reversible stack replays them)
  bool causal_;

 public:
  explicit LanguageModel(const TransformerConfig& c, bool causal = true);
  // ids [B, L] -> logits [B, L, vocab] (or [B, L, outputs] when the config sets outputs)
  Tensor forward(const Tensor& ids, const std::vector<int64_t>& lengths = {}) const;

  // Transformer-XL (models/xl_memory.h, defined in xl_memory.cpp): one segment ids [B, L] after the segments
  // `mem` remembers, whose keys and values each layer also attends to; `mem` then holds this segment's layer
  // inputs too (its last mem_len positions, detached). Causal models only. new_memory() is empty, with the
  // config's mem_len.
  Tensor forward(const Tensor& ids, XLMemory& mem) const;
  XLMemory new_memory() const;

  // Generation with the recurrent form of each layer: one token per call, constant work per token for
  // variants whose state is fixed-size, a growing KV cache for softmax.
  struct State {
    std::vector<std::unique_ptr<AttentionState>> layers;
    int64_t length = 0;
    // Each Linear weight packed for the GEMM at the first step that multiplies by it (ops/weight_panels.h): the
    // weights must not change while this state is used, as its sums over positions already assume.
    std::unique_ptr<WeightPanels> weights = std::make_unique<WeightPanels>();
  };
  State new_state() const;
  Tensor step(const Tensor& ids_t, State& state) const;  // ids_t [B] -> logits [B, vocab]

  // The output head on the final hidden states x [..., d_model]: head, or x Eᵀ with tied embeddings.
  Tensor logits(const Tensor& x) const;

  const TransformerConfig& config() const { return cfg_; }
  Rng& rng() { return rng_; }
  Tensor attention_penalty() const { return eng::attention_penalty(layers); }

  TokenEmbedding embed;
  std::vector<std::unique_ptr<EncoderLayer>> layers;
  std::unique_ptr<Norm> final_norm;
  std::unique_ptr<Linear> head;  // null with tie_embeddings
};

// Encoder-decoder (seq2seq): bidirectional encoder over the source, causal decoder with cross-attention.
class EncoderDecoder : public Module {
  TransformerConfig cfg_;
  Rng rng_;

 public:
  explicit EncoderDecoder(const TransformerConfig& c);
  Tensor encode(const Tensor& src, const std::vector<int64_t>& src_lengths = {}) const;  // [B, Ls, d]
  // Teacher-forced decoder logits [B, Lt, vocab].
  Tensor decode(const Tensor& tgt_in, const Tensor& memory, const std::vector<int64_t>& src_lengths = {}) const;
  Tensor forward(const Tensor& src, const Tensor& tgt_in, const std::vector<int64_t>& src_lengths = {}) const;

  // Greedy decoding with the decoder's recurrent form: starts from `bos`, returns [B, steps] token ids.
  Tensor greedy_decode(const Tensor& src, int64_t bos, int64_t steps, const std::vector<int64_t>& src_lengths = {});

  const TransformerConfig& config() const { return cfg_; }
  Rng& rng() { return rng_; }

  TokenEmbedding src_embed, tgt_embed;
  std::vector<std::unique_ptr<EncoderLayer>> encoder_layers;
  std::vector<std::unique_ptr<DecoderLayer>> decoder_layers;
  std::unique_ptr<Norm> encoder_norm, decoder_norm;
  Linear head;
};

}  // namespace eng
