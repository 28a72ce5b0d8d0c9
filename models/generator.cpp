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

void linear_row(const Linear& l, const float* x, float* y) { row_product(l.weight, l.bias, x, y); }

void norm_row(const Norm& norm, const float* x, float* y, int64_t d) {
  float mean = 0, rstd = 0;
  if (const LayerNorm* ln = norm.layer_norm())
    vec_kernels().norm_row(x, data_or_null(ln->weight), data_or_null(ln->bias), y, d, float(ln->eps()), &mean, &rstd);
  else
    vec_kernels().norm_row(x, norm.rms_norm()->weight.data<float>(), nullptr, y, d, float(norm.rms_norm()->eps()),
                           nullptr, &rstd);
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

std::string check_attention(const Attention& a) {
  if (tag_cast<const SoftmaxAttention>(&a)) return "";
  if (const auto* lin = tag_cast<const LinearAttention>(&a)) {
    const LinearFeature f = lin->feature_map().fused();
    if (f == LinearFeature::EluPlusOne || f == LinearFeature::Relu) return "";
    return "attention '" + a.name() + "' with feature map '" + lin->feature_map().name() +
           "' (only the fused maps elu and relu)";
  }
  return "attention '" + a.name() + "' (softmax, causal-linear and linear only)";
}

}  // namespace

std::string Generator::unsupported(const LanguageModel& model) {
  const TransformerConfig& c = model.config();
  if (c.encoder_layers > 0 && c.decoder_layers == 0) return "an encoder-only model";
  if (c.reversible) return "reversible layers";
  if (c.mem_len > 0) return "a Transformer-XL memory";
  if (c.positional != PositionalKind::None && c.positional != PositionalKind::Sinusoidal &&
      c.positional != PositionalKind::Learned)
    return "positions other than none, sinusoidal and learned";
  for (const auto& layer : model.layers)
    if (std::string why = check_attention(layer->self_attn.mechanism()); !why.empty()) return why;
  return check_parameters(model);
}

Generator::Generator(const LanguageModel& model)
    : model_(model),
      d_(model.config().d_model),
      heads_(model.config().heads),
      groups_(model.config().kv_heads > 0 ? model.config().kv_heads : model.config().heads),
      head_dim_(d_ / heads_),
      max_len_(model.config().max_len) {
  const std::string why = unsupported(model);
  ENG_CHECK(why.empty(), "Generator: the model has ", why, "; LanguageModel::step runs it");
  linear_ = !model.layers.empty() && tag_cast<const LinearAttention>(&model.layers[0]->self_attn.mechanism());
  const size_t d = size_t(d_), kv = size_t(groups_ * head_dim_);
  for (size_t i = 0; i < model.layers.size(); ++i) {
    LayerState st;
    if (linear_) {
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
  hidden_.resize(size_t(model.layers.empty() ? 0 : model.layers[0]->ffn.fc1.out_features()));
  if (!model.layers.empty() && model.layers[0]->ffn.fc3) gate_.resize(hidden_.size());
  scores_.resize(size_t(max_len_));
  logits_.resize(size_t(model.head ? model.head->out_features() : model.config().vocab));
  if (model.config().positional == PositionalKind::Sinusoidal) {
    positions_.reset(new float[d * size_t(max_len_)]);
    for (int64_t i = 0; i < d_; ++i) frequencies_.push_back(sinusoidal_frequency(i, d_));
  }
}

const float* Generator::step(int64_t id) {
  const TransformerConfig& c = model_.config();
  ENG_CHECK(id >= 0 && id < c.vocab, "Generator::step: token id ", id, " is outside the vocabulary of ", c.vocab);
  ENG_CHECK(length_ < max_len_, "Generator::step: position ", length_, " is past the model's max_len of ", max_len_);
  // The embedding: token row · embed_scale (0: sqrt(d_model), Vaswani §3.4), plus the position's row
  // (TokenEmbedding::forward).
  const Tensor& table = model_.embed.tokens.weight;
  if (table.dtype() == DType::U8)
    quant_dequantize_row(table, format_of(table), id, x_.data());
  else
    std::copy_n(table.data<float>() + id * d_, d_, x_.data());
  const float scale = float(c.embed_scale > 0 ? c.embed_scale : std::sqrt(double(d_)));
  for (int64_t i = 0; i < d_; ++i) x_[size_t(i)] *= scale;
  if (positions_) {  // sinusoidal_table's row length_, in f32
    float* row = positions_.get() + length_ * d_;
    for (; positions_ready_ <= length_; ++positions_ready_) {
      float* p = positions_.get() + positions_ready_ * d_;
      for (int64_t i = 0; i < d_; ++i) p[i] = float(sinusoidal_entry(positions_ready_, i, frequencies_[size_t(i)]));
    }
    add_into(x_.data(), row, d_);
  }
  if (const LearnedPositional* learned = model_.embed.learned())
    add_into(x_.data(), learned->weight.data<float>() + length_ * d_, d_);

  for (size_t l = 0; l < model_.layers.size(); ++l) {
    const EncoderLayer& layer = *model_.layers[l];
    if (c.pre_norm) {  // x += attention(norm1(x)); x += ffn(norm2(x))
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
  if (model_.final_norm) {
    norm_row(*model_.final_norm, x_.data(), n_.data(), d_);
    last = n_.data();
  }
  if (model_.head)
    linear_row(*model_.head, last, logits_.data());
  else  // tied: logits = x · tokenᵀ (LanguageModel::logits)
    row_product(model_.embed.tokens.weight, Tensor(), last, logits_.data());
  return logits_.data();
}

// out = W_o · heads(q, k, v) + b_o for the position length_ (MultiHeadAttention::step).
void Generator::attention(size_t layer, const float* x, float* out) {
  const MultiHeadAttention& mha = model_.layers[layer]->self_attn;
  linear_row(mha.q_proj, x, q_.data());
  linear_row(mha.k_proj, x, k_.data());
  linear_row(mha.v_proj, x, v_.data());
  LayerState& st = states_[layer];
  if (const auto* lin = tag_cast<const LinearAttention>(&mha.mechanism()))
    linear_heads(st, lin->feature_map().fused() == LinearFeature::Relu, float(lin->eps()));
  else
    softmax_heads(st, float(static_cast<const SoftmaxAttention&>(mha.mechanism()).scale(head_dim_)));
  linear_row(mha.out_proj, o_.data(), out);
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
  const FeedForward& ffn = model_.layers[layer]->ffn;
  float* h = hidden_.data();
  const int64_t n = ffn.fc1.out_features();
  linear_row(ffn.fc1, x, h);
  if (ffn.fc3) linear_row(*ffn.fc3, x, gate_.data());  // gated: act(fc1 x) * fc3 x
  switch (model_.config().activation) {
    case Activation::Relu:
      for (int64_t i = 0; i < n; ++i) h[i] = std::max(h[i], 0.0f);
      break;
    case Activation::Gelu: vec_kernels().gelu_erf(h, h, n); break;
    case Activation::GeluTanh: vec_kernels().gelu_tanh(h, h, n); break;
    case Activation::SwiGLU: vec_kernels().silu(h, h, n); break;
    case Activation::GeGLU: vec_kernels().gelu_erf(h, h, n); break;
  }
  if (ffn.fc3)
    for (int64_t i = 0; i < n; ++i) h[i] *= gate_[size_t(i)];
  linear_row(ffn.fc2, h, out);
}

}  // namespace eng
