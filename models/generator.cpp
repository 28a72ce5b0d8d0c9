#include "models/generator.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "engine/vec_kernels.h"
#include "models/attention/linear.h"
#include "models/attention/softmax.h"
#include "models/positional.h"
#include "ops/gemm.h"
#include "ops/quant.h"

namespace eng {

namespace {

const float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// A quantized weight's format, from its block size (checked once, by unsupported()).
QuantFormat format_of(const Tensor& wq) {
  return wq.size(2) == quant_block_bytes(QuantFormat::Q8_0) ? QuantFormat::Q8_0 : QuantFormat::Q4_0;
}

// y [N] = W x + b for one row x [K], W [N, K]: the product Linear::forward runs (gemm's dot path for x·Wᵀ, or the
// quantized product for a q8_0 / q4_0 weight).
void row_product(const Tensor& weight, const Tensor& bias, const float* x, float* y) {
  if (weight.dtype() == DType::U8) {
    quant_linear_rows(x, 1, weight, format_of(weight), data_or_null(bias), y);
    return;
  }
  GemmArgs<float> g;
  g.M = 1;
  g.N = weight.size(0);
  g.K = weight.size(1);
  g.A = x;
  g.a_rs = g.K;
  g.a_cs = 1;
  g.B = weight.data<float>();
  g.b_rs = 1;
  g.b_cs = g.K;
  g.C = y;
  g.c_rs = g.N;
  g.bias = data_or_null(bias);
  gemm(g);
}

void linear_row(const GeneratorWeights::Product& p, const float* x, float* y) { row_product(p.weight, p.bias, x, y); }

void norm_row(const GeneratorWeights::NormWeights& norm, const float* x, float* y, int64_t d) {
  float mean = 0, rstd = 0;
  if (norm.rms)
    vec_kernels().norm_row(x, norm.weight.data<float>(), nullptr, y, d, norm.eps, nullptr, &rstd);
  else
    vec_kernels().norm_row(x, data_or_null(norm.weight), data_or_null(norm.bias), y, d, norm.eps, &mean, &rstd);
}

GeneratorWeights::Product product_of(const Linear& l) { return {l.weight, l.bias}; }

GeneratorWeights::NormWeights norm_of(const Norm& norm) {
  if (const LayerNorm* ln = norm.layer_norm()) return {false, ln->weight, ln->bias, float(ln->eps())};
  return {true, norm.rms_norm()->weight, Tensor(), float(norm.rms_norm()->eps())};
}

void add_into(float* x, const float* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += h[i];
}

// f32, or a quantized weight (models/quantized.h) of a Linear or of the token table.
std::string check_parameters(const LanguageModel& model) {
  for (const auto& [name, p] : model.named_parameters()) {
    const bool ok = p.device() == Device::CPU && p.is_contiguous() &&
                    (p.dtype() == DType::F32 || (p.dtype() == DType::U8 && p.dim() == 3));
    if (!ok) return "parameter '" + name + "' is not a contiguous f32 or quantized tensor on the CPU";
  }
  return "";
}

bool softmax_family(const std::string& attention) {
  return attention == "softmax" || attention == "stateful-softmax";
}
bool linear_family(const std::string& attention) { return attention == "linear" || attention == "causal-linear"; }

}  // namespace

std::string generator_unsupported(const TransformerConfig& c) {
  if (c.encoder_layers > 0 && c.decoder_layers == 0) return "an encoder-only model";
  if (c.reversible) return "reversible layers";
  if (c.mem_len > 0) return "a Transformer-XL memory";
  if (c.positional != PositionalKind::None && c.positional != PositionalKind::Sinusoidal &&
      c.positional != PositionalKind::Learned)
    return "positions other than none, sinusoidal and learned";
  if (softmax_family(c.attention)) return "";
  if (linear_family(c.attention)) {
    // The feature map linear.cpp builds, read without marking the option used.
    const auto& options = c.attention_options.items();
    const auto it = options.find("feature_map");
    const std::string map = it == options.end() ? "elu" : it->second;
    if (map == "elu" || map == "relu") return "";
    return "attention '" + c.attention + "' with feature map '" + map + "' (only the fused maps elu and relu)";
  }
  return "attention '" + c.attention + "' (softmax, causal-linear and linear only)";
}

GeneratorWeights generator_shape(const TransformerConfig& c) {
  GeneratorWeights w;
  w.d_model = c.d_model;
  w.heads = c.heads;
  w.kv_heads = c.kv_heads > 0 ? c.kv_heads : c.heads;
  w.max_len = c.max_len;
  w.vocab = c.vocab;
  w.pre_norm = c.pre_norm;
  w.positional = c.positional;
  w.activation = c.activation;
  w.embed_scale = float(c.embed_scale > 0 ? c.embed_scale : std::sqrt(double(c.d_model)));
  w.linear = linear_family(c.attention);
  return w;
}

// The model is built from its config, so the config says what it is (the suite checks this against the layers'
// classes: tests/test_generator_checkpoint.cpp); its parameters must also be ones the kernels read.
std::string Generator::unsupported(const LanguageModel& model) {
  if (std::string why = generator_unsupported(model.config()); !why.empty()) return why;
  return check_parameters(model);
}

GeneratorWeights generator_weights(const LanguageModel& model) {
  const std::string why = Generator::unsupported(model);
  ENG_CHECK(why.empty(), "Generator: the model has ", why, "; LanguageModel::step runs it");
  const TransformerConfig& c = model.config();
  GeneratorWeights w = generator_shape(c);
  w.tokens = model.embed.tokens.weight;
  if (const LearnedPositional* learned = model.embed.learned()) w.positions = learned->weight;
  const int64_t head_dim = c.d_model / c.heads;
  for (const auto& layer : model.layers) {
    const MultiHeadAttention& mha = layer->self_attn;
    if (const auto* lin = tag_cast<const LinearAttention>(&mha.mechanism())) {
      w.relu_features = lin->feature_map().fused() == LinearFeature::Relu;
      w.linear_eps = float(lin->eps());
    } else {
      w.softmax_scale = float(static_cast<const SoftmaxAttention&>(mha.mechanism()).scale(head_dim));
    }
    const FeedForward& ffn = layer->ffn;
    w.layers.push_back({norm_of(layer->norm1), norm_of(layer->norm2), product_of(mha.q_proj), product_of(mha.k_proj),
                        product_of(mha.v_proj), product_of(mha.out_proj), product_of(ffn.fc1), product_of(ffn.fc2),
                        ffn.fc3 ? product_of(*ffn.fc3) : GeneratorWeights::Product()});
  }
  if (model.final_norm) {
    w.final_norm = true;
    w.final = norm_of(*model.final_norm);
  }
  if (model.head) w.head = product_of(*model.head);
  return w;
}

Generator::Generator(const LanguageModel& model) : Generator(generator_weights(model)) {}

Generator::Generator(GeneratorWeights weights)
    : w_(std::move(weights)),
      d_(w_.d_model),
      heads_(w_.heads),
      groups_(w_.kv_heads),
      head_dim_(d_ / heads_),
      max_len_(w_.max_len) {
  const size_t d = size_t(d_), kv = size_t(groups_ * head_dim_);
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    LayerState st;
    if (w_.linear) {
      st.s.reset(new float[size_t(heads_ * head_dim_ * head_dim_)]);
      st.z.reset(new float[size_t(heads_ * head_dim_)]);
    } else {
      st.k.reset(new float[kv * size_t(max_len_)]);
      st.v.reset(new float[kv * size_t(max_len_)]);
    }
    states_.push_back(std::move(st));
  }
  for (auto* buf : {&x_, &n_, &q_, &o_, &a_}) buf->resize(d);
  k_.resize(kv);
  v_.resize(kv);
  hidden_.resize(size_t(w_.layers.empty() ? 0 : w_.layers[0].fc1.weight.size(0)));
  if (!w_.layers.empty() && w_.layers[0].fc3.weight.defined()) gate_.resize(hidden_.size());
  scores_.resize(size_t(max_len_));
  logits_.resize(size_t(w_.head.weight.defined() ? w_.head.weight.size(0) : w_.vocab));
  if (w_.positional == PositionalKind::Sinusoidal) {
    positions_.reset(new float[d * size_t(max_len_)]);
    for (int64_t i = 0; i < d_; ++i) frequencies_.push_back(sinusoidal_frequency(i, d_));
  }
}

const float* Generator::step(int64_t id) {
  ENG_CHECK(id >= 0 && id < w_.vocab, "Generator::step: token id ", id, " is outside the vocabulary of ", w_.vocab);
  ENG_CHECK(length_ < max_len_, "Generator::step: position ", length_, " is past the model's max_len of ", max_len_);
  // The embedding: token row · embed_scale (sqrt(d_model) unless the config sets it, Vaswani §3.4), plus the
  // position's row (TokenEmbedding::forward).
  const Tensor& table = w_.tokens;
  if (table.dtype() == DType::U8)
    quant_dequantize_row(table, format_of(table), id, x_.data());
  else
    std::copy_n(table.data<float>() + id * d_, d_, x_.data());
  for (int64_t i = 0; i < d_; ++i) x_[size_t(i)] *= w_.embed_scale;
  if (positions_) {  // sinusoidal_table's row length_, in f32
    float* row = positions_.get() + length_ * d_;
    for (; positions_ready_ <= length_; ++positions_ready_) {
      float* p = positions_.get() + positions_ready_ * d_;
      for (int64_t i = 0; i < d_; ++i) p[i] = float(sinusoidal_entry(positions_ready_, i, frequencies_[size_t(i)]));
    }
    add_into(x_.data(), row, d_);
  }
  if (w_.positions.defined()) add_into(x_.data(), w_.positions.data<float>() + length_ * d_, d_);

  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const GeneratorWeights::Layer& layer = w_.layers[l];
    if (w_.pre_norm) {  // x += attention(norm1(x)); x += ffn(norm2(x))
      norm_row(layer.norm1, x_.data(), n_.data(), d_);
      attention(l, n_.data(), a_.data());
      add_into(x_.data(), a_.data(), d_);
      norm_row(layer.norm2, x_.data(), n_.data(), d_);
      feed_forward(l, n_.data(), a_.data());
      add_into(x_.data(), a_.data(), d_);
    } else {  // x = norm1(x + attention(x)); x = norm2(x + ffn(x))
      attention(l, x_.data(), a_.data());
      add_into(x_.data(), a_.data(), d_);
      norm_row(layer.norm1, x_.data(), x_.data(), d_);
      feed_forward(l, x_.data(), a_.data());
      add_into(x_.data(), a_.data(), d_);
      norm_row(layer.norm2, x_.data(), x_.data(), d_);
    }
  }
  length_++;
  const float* last = x_.data();
  if (w_.final_norm) {
    norm_row(w_.final, x_.data(), n_.data(), d_);
    last = n_.data();
  }
  if (w_.head.weight.defined())
    linear_row(w_.head, last, logits_.data());
  else  // tied: logits = x · tokensᵀ (LanguageModel::logits)
    row_product(w_.tokens, Tensor(), last, logits_.data());
  return logits_.data();
}

// out = W_o · heads(q, k, v) + b_o for the position length_ (MultiHeadAttention::step).
void Generator::attention(size_t layer, const float* x, float* out) {
  const GeneratorWeights::Layer& w = w_.layers[layer];
  linear_row(w.q, x, q_.data());
  linear_row(w.k, x, k_.data());
  linear_row(w.v, x, v_.data());
  LayerState& st = states_[layer];
  if (w_.linear)
    linear_heads(st, w_.relu_features, w_.linear_eps);
  else
    softmax_heads(st, w_.softmax_scale);
  linear_row(w.out, o_.data(), out);
}
// Head h reads K/V group h / (H/G) (repeat_heads). Keys and values of a group lie [max_len, Dh], so each head's
// scores are dot products over contiguous rows: o_h = softmax(scale · K q_h) V over positions 0..t.
void Generator::softmax_heads(LayerState& st, float scale) {
  const int64_t t = length_, Dh = head_dim_, per_group = heads_ / groups_;
  for (int64_t g = 0; g < groups_; ++g) {
    std::copy_n(k_.data() + g * Dh, Dh, st.k.get() + (g * max_len_ + t) * Dh);
    std::copy_n(v_.data() + g * Dh, Dh, st.v.get() + (g * max_len_ + t) * Dh);
  }
  const VecKernels& vk = vec_kernels();
  for (int64_t h = 0; h < heads_; ++h) {
    const int64_t g = h / per_group;
    const float* K = st.k.get() + g * max_len_ * Dh;
    const float* V = st.v.get() + g * max_len_ * Dh;
    const float* q = q_.data() + h * Dh;
    for (int64_t j = 0; j <= t; ++j) scores_[size_t(j)] = vk.dot(q, K + j * Dh, Dh) * scale;
    vk.softmax_row(scores_.data(), scores_.data(), t + 1);
    float* o = o_.data() + h * Dh;
    std::fill(o, o + Dh, 0.0f);
    for (int64_t j = 0; j <= t; ++j) {
      const float p = scores_[size_t(j)];
      for (int64_t i = 0; i < Dh; ++i) o[i] += p * V[j * Dh + i];
    }
  }
}

// s_h += φ(k) vᵀ, z_h += φ(k) (Eq. 18–19), then o_h = φ(q)ᵀ s_h / (φ(q)ᵀ z_h + eps) (Eq. 20), each head with its
// group's k and v (MultiHeadAttention expands the groups for this mechanism).
void Generator::linear_heads(LayerState& st, bool relu, float eps) {
  const int64_t Dh = head_dim_, per_group = heads_ / groups_;
  auto phi = [relu](float* x, int64_t n) {
    if (relu)
      for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], 0.0f);
    else
      vec_kernels().elu_plus_one(x, x, n);
  };
  phi(q_.data(), heads_ * Dh);
  phi(k_.data(), groups_ * Dh);
  for (int64_t h = 0; h < heads_; ++h) {
    const float* fk = k_.data() + (h / per_group) * Dh;
    const float* v = v_.data() + (h / per_group) * Dh;
    const float* fq = q_.data() + h * Dh;
    float* s = st.s.get() + h * Dh * Dh;
    float* z = st.z.get() + h * Dh;
    if (length_ == 0) {  // a new sequence starts from s = 0, z = 0
      std::fill(s, s + Dh * Dh, 0.0f);
      std::fill(z, z + Dh, 0.0f);
    }
    float* o = o_.data() + h * Dh;
    std::fill(o, o + Dh, 0.0f);
    float den = eps;
    for (int64_t m = 0; m < Dh; ++m) {
      float* srow = s + m * Dh;
      z[m] += fk[m];
      for (int64_t j = 0; j < Dh; ++j) srow[j] += fk[m] * v[j];
      den += fq[m] * z[m];
      for (int64_t j = 0; j < Dh; ++j) o[j] += fq[m] * srow[j];
    }
    for (int64_t j = 0; j < Dh; ++j) o[j] /= den;
  }
}

void Generator::feed_forward(size_t layer, const float* x, float* out) {
  const GeneratorWeights::Layer& w = w_.layers[layer];
  const bool gated = w.fc3.weight.defined();
  float* h = hidden_.data();
  const int64_t n = int64_t(hidden_.size());
  linear_row(w.fc1, x, h);
  if (gated) linear_row(w.fc3, x, gate_.data());  // gated: act(fc1 x) * fc3 x
  switch (w_.activation) {
    case Activation::Relu:
      for (int64_t i = 0; i < n; ++i) h[i] = std::max(h[i], 0.0f);
      break;
    case Activation::Gelu: vec_kernels().gelu_erf(h, h, n); break;
    case Activation::GeluTanh: vec_kernels().gelu_tanh(h, h, n); break;
    case Activation::SwiGLU: vec_kernels().silu(h, h, n); break;
    case Activation::GeGLU: vec_kernels().gelu_erf(h, h, n); break;
  }
  if (gated)
    for (int64_t i = 0; i < n; ++i) h[i] *= gate_[size_t(i)];
  linear_row(w.fc2, h, out);
}

}  // namespace eng
