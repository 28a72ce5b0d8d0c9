#include "models/transformer.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/parse_number.h"
#include "models/reversible.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/matmul.h"
#include "ops/quant.h"
#include "ops/reduce.h"
#include "ops/view.h"

namespace eng {

// ---- config ----------------------------------------------------------------------------------

void TransformerConfig::validate() const {
  ENG_CHECK(vocab >= 2, "config: vocab must be >= 2, got ", vocab);
  ENG_CHECK(d_model >= 1 && heads >= 1, "config: d_model and heads must be >= 1");
  ENG_CHECK(outputs >= 0, "config: outputs must be >= 0 (0 = vocab), got ", outputs);
  ENG_CHECK(d_model % heads == 0, "config: d_model ", d_model, " is not divisible by heads ", heads);
  ENG_CHECK(kv_heads == 0 || (kv_heads >= 1 && kv_heads <= heads && heads % kv_heads == 0), "config: kv_heads ",
            kv_heads, " must divide heads ", heads, " (0 = heads, 1 = multi-query)");
  ENG_CHECK(d_ff >= 1, "config: d_ff must be >= 1, got ", d_ff);
  ENG_CHECK(encoder_layers >= 0 && decoder_layers >= 0 && encoder_layers + decoder_layers >= 1,
            "config: need at least one layer (encoder_layers ", encoder_layers, ", decoder_layers ", decoder_layers, ")");
  ENG_CHECK(max_len >= 1, "config: max_len must be >= 1, got ", max_len);
  ENG_CHECK(dropout >= 0 && dropout < 1, "config: dropout must be in [0, 1), got ", dropout);
  ENG_CHECK(positional != PositionalKind::Rotary || (d_model / heads) % 2 == 0,
            "config: rotary encoding needs an even head dim, got ", d_model / heads);
  ENG_CHECK(!reversible || pre_norm, "config: reversible layers need pre-norm (norm=pre); post-norm's norm after "
            "the residual add cannot be inverted");
  ENG_CHECK(!reversible || encoder_layers == 0 || decoder_layers == 0, "config: reversible layers are for "
            "decoder-only and encoder-only models, not encoder-decoder (encoder_layers ", encoder_layers,
            ", decoder_layers ", decoder_layers, ")");
  ENG_CHECK(mem_len >= 0, "config: mem_len must be >= 0, got ", mem_len);
  ENG_CHECK(embed_scale >= 0 && std::isfinite(embed_scale), "config: embed_scale must be >= 0 (0 = sqrt(d_model)), "
            "got ", embed_scale);
  ENG_CHECK(rope_theta > 0 && std::isfinite(rope_theta), "config: rope_theta must be positive, got ", rope_theta);
  ENG_CHECK(norm_eps >= 0 && norm_eps < 1, "config: norm_eps must be in [0, 1) (0 = the norm's default), got ",
            norm_eps);
  ENG_CHECK(!tie_embeddings || (outputs == 0 && (encoder_layers == 0 || decoder_layers == 0)), "config: "
            "tie_embeddings needs a decoder-only or encoder-only model whose head outputs the vocabulary (outputs ",
            outputs, ", encoder_layers ", encoder_layers, ", decoder_layers ", decoder_layers, ")");
  ENG_CHECK(mem_len == 0 || (encoder_layers == 0 && !reversible && !positional_is_absolute(positional)),
            "config: mem_len ", mem_len, " (Transformer-XL memory) needs a decoder-only model (encoder_layers ",
            encoder_layers, "), no reversible layers and positions not added to the embeddings (positional ",
            positional_name(positional), "; relative, rotary, alibi or none)");
}

namespace {

std::string join_options(const AttentionOptions& o) {
  std::string s;
  for (const auto& [k, v] : o.items()) s += (s.empty() ? "" : ";") + k + "=" + v;
  return s;
}

AttentionOptions split_options(const std::string& s) {
  AttentionOptions o;
  for (size_t begin = 0; begin < s.size();) {
    const size_t end = std::min(s.find(';', begin), s.size());
    const std::string item = s.substr(begin, end - begin);
    begin = end + 1;
    if (item.empty()) continue;
    auto eq = item.find('=');
    ENG_CHECK(eq != std::string::npos && eq > 0, "config: attention option '", item, "' is not name=value");
    o.set(item.substr(0, eq), item.substr(eq + 1));
  }
  return o;
}

std::string real_text(double v) { return general_text(v, 17); }

bool to_bool(const std::string& key, const std::string& v) {
  ENG_CHECK(v == "true" || v == "false", "config: ", key, " must be true or false, got '", v, "'");
  return v == "true";
}

int64_t to_int(const std::string& key, const std::string& v) { return parse_int(v, IntRange{}, "config: " + key); }
double to_double(const std::string& key, const std::string& v) { return parse_real(v, RealRange{}, "config: " + key); }

}  // namespace

std::map<std::string, std::string> TransformerConfig::to_map() const {
  std::map<std::string, std::string> m{{"vocab", std::to_string(vocab)},
                                       {"d_model", std::to_string(d_model)},
                                       {"heads", std::to_string(heads)},
                                       {"d_ff", std::to_string(d_ff)},
                                       {"encoder_layers", std::to_string(encoder_layers)},
                                       {"decoder_layers", std::to_string(decoder_layers)},
                                       {"max_len", std::to_string(max_len)},
                                       {"dropout", real_text(dropout)},
                                       {"attention", attention},
                                       {"attention_options", join_options(attention_options)},
                                       {"cross_attention", cross_attention},
                                       {"norm", pre_norm ? "pre" : "post"},
                                       {"norm_type", rms_norm ? "rms" : "layer"},
                                       {"positional", positional_name(positional)},
                                       {"activation", activation_name(activation)},
                                       {"seed", std::to_string(seed)}};
  // Recorded only when it groups heads, so plain multi-head configs (and old checkpoints, which lack the
  // key and load as kv_heads = heads) keep exactly the keys they had.
  if (kv_heads != 0 && kv_heads != heads) m["kv_heads"] = std::to_string(kv_heads);
  // Likewise recorded only when on: old checkpoints and plain models load as reversible = false.
  if (reversible) m["reversible"] = "true";
  if (mem_len != 0) m["mem_len"] = std::to_string(mem_len);
  if (outputs != 0) m["outputs"] = std::to_string(outputs);
  // The architecture options of issue 23 (GPT-2, LLaMA), also written only when they differ from the model that
  // every earlier checkpoint holds.
  if (!bias) m["bias"] = "false";
  if (tie_embeddings) m["tie_embeddings"] = "true";
  if (embed_scale != 0) m["embed_scale"] = real_text(embed_scale);
  if (rope_theta != 10000) m["rope_theta"] = real_text(rope_theta);
  if (rope_pairing != RopePairing::RotateHalf) m["rope_pairing"] = rope_pairing_name(rope_pairing);
  if (norm_eps != 0) m["norm_eps"] = real_text(norm_eps);
  return m;
}

TransformerConfig TransformerConfig::from_map(const std::map<std::string, std::string>& m) {
  // The keys to_map always writes, since the first checkpoint: a default in place of one would build another
  // model, which may even load the same weights (positional, norm). kv_heads, reversible, mem_len and outputs
  // and the architecture options (bias ... norm_eps) are written only when set, so their absence is their default.
  for (const char* key : {"vocab", "d_model", "heads", "d_ff", "encoder_layers", "decoder_layers", "max_len",
                          "dropout", "attention", "attention_options", "cross_attention", "norm", "norm_type",
                          "positional", "activation", "seed"})
    ENG_CHECK(m.count(key), "config: the required key '", key, "' is missing");
  TransformerConfig c;
  for (const auto& [k, v] : m) {
    if (k == "vocab") c.vocab = to_int(k, v);
    else if (k == "d_model") c.d_model = to_int(k, v);
    else if (k == "heads") c.heads = to_int(k, v);
    else if (k == "kv_heads") c.kv_heads = to_int(k, v);
    else if (k == "d_ff") c.d_ff = to_int(k, v);
    else if (k == "encoder_layers") c.encoder_layers = to_int(k, v);
    else if (k == "decoder_layers") c.decoder_layers = to_int(k, v);
    else if (k == "max_len") c.max_len = to_int(k, v);
    else if (k == "mem_len") c.mem_len = to_int(k, v);
    else if (k == "outputs") c.outputs = to_int(k, v);
    else if (k == "dropout") c.dropout = to_double(k, v);
    else if (k == "attention") c.attention = v;
    else if (k == "attention_options") c.attention_options = split_options(v);
    else if (k == "cross_attention") c.cross_attention = v;
    else if (k == "norm") {
      ENG_CHECK(v == "pre" || v == "post", "config: norm must be pre or post, got '", v, "'");
      c.pre_norm = v == "pre";
    } else if (k == "norm_type") {
      ENG_CHECK(v == "layer" || v == "rms", "config: norm_type must be layer or rms, got '", v, "'");
      c.rms_norm = v == "rms";
    } else if (k == "positional") c.positional = parse_positional(v);
    else if (k == "activation") c.activation = parse_activation(v);
    else if (k == "seed") c.seed = uint64_t(to_int(k, v));
    else if (k == "reversible") c.reversible = to_bool(k, v);
    else if (k == "bias") c.bias = to_bool(k, v);
    else if (k == "tie_embeddings") c.tie_embeddings = to_bool(k, v);
    else if (k == "embed_scale") c.embed_scale = to_double(k, v);
    else if (k == "rope_theta") c.rope_theta = to_double(k, v);
    else if (k == "rope_pairing") c.rope_pairing = parse_rope_pairing(v);
    else if (k == "norm_eps") c.norm_eps = to_double(k, v);
    else fail("config: unknown key '", k, "'");
  }
  c.validate();
  return c;
}

// ---- layers ----------------------------------------------------------------------------------

Norm::Norm(int64_t dim, bool rms, double eps) {
  if (rms) {
    rms_ = eps > 0 ? std::make_unique<RMSNorm>(dim, eps) : std::make_unique<RMSNorm>(dim);
    register_module("rms", *rms_);
  } else {
    ln_ = eps > 0 ? std::make_unique<LayerNorm>(dim, eps) : std::make_unique<LayerNorm>(dim);
    register_module("ln", *ln_);
  }
}

Tensor Norm::forward(const Tensor& x) const { return rms_ ? rms_->forward(x) : ln_->forward(x); }

AddNormResult Norm::forward_add(const Tensor& x, const Tensor& h) const {
  return rms_ ? rms_->forward_add(x, h) : ln_->forward_add(x, h);
}

namespace {

MultiHeadConfig attention_config(const TransformerConfig& c, const std::string& attention, bool causal,
                                 bool positional) {
  MultiHeadConfig m;
  m.d_model = c.d_model;
  m.heads = c.heads;
  m.kv_heads = c.kv_heads;
  m.attention = attention;
  m.options = attention == c.attention ? c.attention_options : AttentionOptions();
  m.max_len = c.max_len;
  m.causal = causal;
  m.dropout = c.dropout;
  m.positional = positional ? c.positional : PositionalKind::None;
  m.rope_theta = c.rope_theta;
  m.rope_pairing = c.rope_pairing;
  m.bias = c.bias;
  m.seed = c.seed;
  return m;
}

// One residual sub-layer, pre- or post-norm (post-norm fuses the add with the norm).
template <class F>
Tensor residual(const Tensor& x, const Norm& norm, bool pre_norm, const Dropout& drop, F sublayer) {
  if (pre_norm) return add(x, drop.forward(sublayer(norm.forward(x))));
  return norm.forward_add(x, drop.forward(sublayer(x))).normed;
}

}  // namespace

EncoderLayer::EncoderLayer(const TransformerConfig& c, bool causal, const std::string& attention, Rng& rng)
    : self_attn(attention_config(c, attention, causal, true), rng),
      ffn(c.d_model, c.d_ff, c.activation, c.dropout, rng, c.bias),
      norm1(c.d_model, c.rms_norm, c.norm_eps),
      norm2(c.d_model, c.rms_norm, c.norm_eps),
      pre_norm_(c.pre_norm),
      drop_(c.dropout, rng) {
  register_module("self_attn", self_attn);
  register_module("ffn", ffn);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout", drop_);
}

Tensor EncoderLayer::forward(const Tensor& x, const AttentionMask& mask, const Tensor& memory) const {
  const auto attend = [&](const Tensor& t) {
    if (!memory.defined()) return self_attn.forward(t, t, mask);
    // The keys see the memory as the attention sees x: normalised first when the norm comes before it.
    return self_attn.forward(t, concat({pre_norm_ ? norm1.forward(memory) : memory, t}, 1), mask);
  };
  if (pre_norm_) {
    // The attention's residual add and the FFN's norm in one pass.
    const AddNormResult r = norm2.forward_add(x, drop_.forward(attend(norm1.forward(x))));
    return add(r.sum, drop_.forward(ffn.forward(r.normed)));
  }
  Tensor h = residual(x, norm1, pre_norm_, drop_, attend);
  return residual(h, norm2, pre_norm_, drop_, [&](const Tensor& t) { return ffn.forward(t); });
}

Tensor EncoderLayer::step(const Tensor& x_t, AttentionState& state) const {
  Tensor h = residual(x_t, norm1, pre_norm_, drop_, [&](const Tensor& t) { return self_attn.step(t, state); });
  return residual(h, norm2, pre_norm_, drop_, [&](const Tensor& t) { return ffn.forward(t); });
}

Tensor EncoderLayer::attention_branch(const Tensor& x, const AttentionMask& mask) const {
  Tensor t = norm1.forward(x);
  return drop_.forward(self_attn.forward(t, t, mask));
}

Tensor EncoderLayer::attention_step_branch(const Tensor& x_t, AttentionState& state) const {
  return drop_.forward(self_attn.step(norm1.forward(x_t), state));
}

Tensor EncoderLayer::ffn_branch(const Tensor& x) const { return drop_.forward(ffn.forward(norm2.forward(x))); }

DecoderLayer::DecoderLayer(const TransformerConfig& c, Rng& rng)
    : self_attn(attention_config(c, c.attention, true, true), rng),
      cross_attn(attention_config(c, c.cross_attention, false, false), rng),
      ffn(c.d_model, c.d_ff, c.activation, c.dropout, rng, c.bias),
      norm1(c.d_model, c.rms_norm, c.norm_eps),
      norm2(c.d_model, c.rms_norm, c.norm_eps),
      norm3(c.d_model, c.rms_norm, c.norm_eps),
      pre_norm_(c.pre_norm),
      drop_(c.dropout, rng) {
  register_module("self_attn", self_attn);
  register_module("cross_attn", cross_attn);
  register_module("ffn", ffn);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("norm3", norm3);
  register_module("dropout", drop_);
}

Tensor DecoderLayer::forward(const Tensor& x, const Tensor& memory, const AttentionMask& self_mask,
                             const std::vector<int64_t>& memory_lengths) const {
  AttentionMask cross;
  cross.key_lengths = memory_lengths;
  Tensor h = residual(x, norm1, pre_norm_, drop_, [&](const Tensor& t) { return self_attn.forward(t, t, self_mask); });
  h = residual(h, norm2, pre_norm_, drop_, [&](const Tensor& t) { return cross_attn.forward(t, memory, cross); });
  return residual(h, norm3, pre_norm_, drop_, [&](const Tensor& t) { return ffn.forward(t); });
}

Tensor DecoderLayer::step(const Tensor& x_t, AttentionState& state, const KVMemory& memory) const {
  Tensor h = residual(x_t, norm1, pre_norm_, drop_, [&](const Tensor& t) { return self_attn.step(t, state); });
  h = residual(h, norm2, pre_norm_, drop_, [&](const Tensor& t) { return cross_attn.attend_memory(t, memory); });
  return residual(h, norm3, pre_norm_, drop_, [&](const Tensor& t) { return ffn.forward(t); });
}

TokenEmbedding::TokenEmbedding(const TransformerConfig& c, Rng& rng)
    : tokens(c.vocab, c.d_model, rng, 1.0 / std::sqrt(double(c.d_model))), cfg_(c), drop_(c.dropout, rng) {
  register_module("tokens", tokens);
  if (c.positional == PositionalKind::Learned) {
    learned_ = std::make_unique<LearnedPositional>(c.max_len, c.d_model, rng);
    register_module("positions", *learned_);
  }
  register_module("dropout", drop_);
}

Tensor TokenEmbedding::forward(const Tensor& ids, int64_t offset) const {
  ENG_CHECK(ids.dim() == 2 && ids.dtype() == DType::I64, "embedding: ids must be i64 [B, L], got ",
            dtype_name(ids.dtype()), " ", ids.shape());
  const int64_t L = ids.size(1);
  ENG_CHECK(offset + L <= cfg_.max_len, "embedding: positions up to ", offset + L, " exceed max_len ", cfg_.max_len);
  const double scale = cfg_.embed_scale > 0 ? cfg_.embed_scale : std::sqrt(double(cfg_.d_model));
  Tensor x = tokens.forward(ids);
  if (scale != 1) x = mul_scalar(x, scale);
  if (cfg_.positional == PositionalKind::Sinusoidal)
    x = add(x, to_device(sinusoidal_table(L, cfg_.d_model, offset, x.dtype()), x.device()));
  else if (learned_)
    x = add(x, learned_->forward(L, offset));
  return drop_.forward(x);
}

// ---- models ----------------------------------------------------------------------------------

namespace {

std::unique_ptr<Norm> final_norm_for(const TransformerConfig& c) {
  return c.pre_norm ? std::make_unique<Norm>(c.d_model, c.rms_norm, c.norm_eps) : nullptr;
}

const TransformerConfig& validated(const TransformerConfig& c) {
  c.validate();
  return c;
}

std::unique_ptr<Linear> head_for(const TransformerConfig& c, Rng& rng) {
  if (c.tie_embeddings) return nullptr;
  return std::make_unique<Linear>(c.d_model, c.outputs > 0 ? c.outputs : c.vocab, rng, c.bias);
}

}  // namespace

LanguageModel::LanguageModel(const TransformerConfig& c, bool causal)
    : cfg_(validated(c)), rng_(c.seed), causal_(causal), embed(c, rng_), final_norm(final_norm_for(c)),
      head(head_for(c, rng_)) {
  register_module("embed", embed);
  const int64_t n = std::max(c.decoder_layers, c.encoder_layers);
  for (int64_t i = 0; i < n; ++i) {
    layers.push_back(std::make_unique<EncoderLayer>(c, causal, c.attention, rng_));
    register_module("layers" + std::to_string(i), *layers.back());
  }
  if (final_norm) register_module("final_norm", *final_norm);
  if (head) register_module("head", *head);
}

Tensor LanguageModel::logits(const Tensor& x) const {
  if (head) return head->forward(x);
  const Tensor& table = embed.tokens.weight;  // tied: x · Eᵀ
  if (table.dtype() == DType::U8) return quant_linear(x, table, quant_format_of(table, "LanguageModel: tied head"));
  return matmul(x, transpose(table, 0, 1));
}

Tensor LanguageModel::forward(const Tensor& ids, const std::vector<int64_t>& lengths) const {
  AttentionMask mask;
  mask.causal = causal_;
  mask.key_lengths = lengths;
  Tensor x = embed.forward(ids);
  if (cfg_.reversible) {
    x = reversible_stack(layers, x, mask, rng_);
  } else {
    for (const auto& layer : layers) x = layer->forward(x, mask);
  }
  if (final_norm) x = final_norm->forward(x);
  return logits(x);
}

Tensor attention_penalty(const std::vector<std::unique_ptr<EncoderLayer>>& layers) {
  Tensor total;
  for (const auto& layer : layers) {
    const Tensor p = layer->self_attn.mechanism().penalty();
    if (p.defined()) total = total.defined() ? add(total, p) : p;
  }
  return total;
}

LanguageModel::State LanguageModel::new_state() const {
  ENG_CHECK(causal_, "LanguageModel: generation needs a causal model");
  State s;
  for (const auto& layer : layers) s.layers.push_back(layer->new_state());
  return s;
}

Tensor LanguageModel::step(const Tensor& ids_t, State& state) const {
  ENG_CHECK(ids_t.dim() == 1, "LanguageModel::step: ids must be [B], got ", ids_t.shape());
  const WeightPanelsScope packed(*state.weights);
  Tensor x = embed.forward(reshape(ids_t, {ids_t.size(0), 1}), state.length);
  if (cfg_.reversible) {
    x = reversible_step(layers, x, state.layers);
  } else {
    for (size_t i = 0; i < layers.size(); ++i) x = layers[i]->step(x, *state.layers[i]);
  }
  state.length++;
  if (final_norm) x = final_norm->forward(x);
  return reshape(logits(x), {ids_t.size(0), cfg_.outputs > 0 ? cfg_.outputs : cfg_.vocab});
}

EncoderDecoder::EncoderDecoder(const TransformerConfig& c)
    : cfg_(validated(c)), rng_(c.seed), src_embed(c, rng_), tgt_embed(c, rng_), head(c.d_model, c.vocab, rng_, c.bias) {
  ENG_CHECK(c.encoder_layers >= 1 && c.decoder_layers >= 1, "EncoderDecoder: needs encoder_layers >= 1 and "
            "decoder_layers >= 1, got ", c.encoder_layers, " and ", c.decoder_layers);
  register_module("src_embed", src_embed);
  register_module("tgt_embed", tgt_embed);
  for (int64_t i = 0; i < c.encoder_layers; ++i) {
    encoder_layers.push_back(std::make_unique<EncoderLayer>(c, false, c.attention, rng_));
    register_module("encoder" + std::to_string(i), *encoder_layers.back());
  }
  for (int64_t i = 0; i < c.decoder_layers; ++i) {
    decoder_layers.push_back(std::make_unique<DecoderLayer>(c, rng_));
    register_module("decoder" + std::to_string(i), *decoder_layers.back());
  }
  encoder_norm = final_norm_for(c);
  decoder_norm = final_norm_for(c);
  if (encoder_norm) register_module("encoder_norm", *encoder_norm);
  if (decoder_norm) register_module("decoder_norm", *decoder_norm);
  register_module("head", head);
}

Tensor EncoderDecoder::encode(const Tensor& src, const std::vector<int64_t>& src_lengths) const {
  AttentionMask mask;
  mask.key_lengths = src_lengths;
  Tensor x = src_embed.forward(src);
  for (const auto& layer : encoder_layers) x = layer->forward(x, mask);
  return encoder_norm ? encoder_norm->forward(x) : x;
}

Tensor EncoderDecoder::decode(const Tensor& tgt_in, const Tensor& memory,
                              const std::vector<int64_t>& src_lengths) const {
  AttentionMask self_mask;
  self_mask.causal = true;
  Tensor x = tgt_embed.forward(tgt_in);
  for (const auto& layer : decoder_layers) x = layer->forward(x, memory, self_mask, src_lengths);
  if (decoder_norm) x = decoder_norm->forward(x);
  return head.forward(x);
}

Tensor EncoderDecoder::forward(const Tensor& src, const Tensor& tgt_in, const std::vector<int64_t>& src_lengths) const {
  return decode(tgt_in, encode(src, src_lengths), src_lengths);
}

Tensor EncoderDecoder::greedy_decode(const Tensor& src, int64_t bos, int64_t steps,
                                     const std::vector<int64_t>& src_lengths) {
  NoGradGuard no_grad;
  const int64_t B = src.size(0);
  Tensor memory = encode(src, src_lengths);
  std::vector<KVMemory> mems;
  std::vector<std::unique_ptr<AttentionState>> states;
  for (const auto& layer : decoder_layers) {
    mems.push_back(layer->cross_attn.project_memory(memory, src_lengths));
    states.push_back(layer->new_state());
  }
  Tensor out = zeros({B, steps}, DType::I64);
  Tensor cur = full({B, 1}, double(bos), DType::I64);
  for (int64_t t = 0; t < steps; ++t) {
    Tensor x = tgt_embed.forward(cur, t);
    for (size_t i = 0; i < decoder_layers.size(); ++i) {
      x = decoder_layers[i]->step(x, *states[i], mems[i]);
    }
    if (decoder_norm) x = decoder_norm->forward(x);
    Tensor logits = head.forward(x);  // [B, 1, vocab]
    for (int64_t b = 0; b < B; ++b) {
      int64_t best = 0;
      for (int64_t v = 1; v < cfg_.vocab; ++v)
        if (logits.at({b, 0, v}) > logits.at({b, 0, best})) best = v;
      out.set_at({b, t}, double(best));
      cur.set_at({b, 0}, double(best));
    }
  }
  return out;
}

}  // namespace eng
