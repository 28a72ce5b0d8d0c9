#include "models/generator_checkpoint.h"

#include <cmath>

#include "engine/error.h"

namespace eng {

namespace {

// Parameter `name` [shape] of LanguageModel(c), in the order Module::named_parameters lists them.
struct SpecBuilder {
  ModelSpec spec;
  void add(const std::string& name, Shape shape, bool quantizable = false) {
    spec.parameters.push_back({name, std::move(shape), DType::F32, quantizable});
  }
  void linear(const std::string& name, int64_t in, int64_t out, bool bias) {  // models/linear.h
    add(name + ".weight", {out, in}, true);
    if (bias) add(name + ".bias", {out});
  }
  void norm(const std::string& name, int64_t d, bool rms) {  // Norm: "ln" (weight, bias) or "rms" (weight)
    add(name + (rms ? ".rms.weight" : ".ln.weight"), {d});
    if (!rms) add(name + ".ln.bias", {d});
  }
};

}  // namespace

ModelSpec language_model_spec(const TransformerConfig& c) {
  SpecBuilder b;
  b.add("embed.tokens.weight", {c.vocab, c.d_model}, true);
  if (c.positional == PositionalKind::Learned) b.add("embed.positions.weight", {c.max_len, c.d_model});
  const int64_t kv = (c.kv_heads > 0 ? c.kv_heads : c.heads) * (c.d_model / c.heads);
  for (int64_t i = 0; i < std::max(c.encoder_layers, c.decoder_layers); ++i) {
    const std::string layer = "layers" + std::to_string(i);
    b.linear(layer + ".self_attn.q_proj", c.d_model, c.d_model, c.bias);
    b.linear(layer + ".self_attn.k_proj", c.d_model, kv, c.bias);
    b.linear(layer + ".self_attn.v_proj", c.d_model, kv, c.bias);
    b.linear(layer + ".self_attn.out_proj", c.d_model, c.d_model, c.bias);
    b.linear(layer + ".ffn.fc1", c.d_model, c.d_ff, c.bias);
    b.linear(layer + ".ffn.fc2", c.d_ff, c.d_model, c.bias);
    if (activation_is_gated(c.activation)) b.linear(layer + ".ffn.fc3", c.d_model, c.d_ff, c.bias);
    b.norm(layer + ".norm1", c.d_model, c.rms_norm);
    b.norm(layer + ".norm2", c.d_model, c.rms_norm);
  }
  if (c.pre_norm) b.norm("final_norm", c.d_model, c.rms_norm);
  if (!c.tie_embeddings) b.linear("head", c.d_model, c.outputs > 0 ? c.outputs : c.vocab, c.bias);
  return b.spec;
}

GeneratorWeights generator_weights(const SafetensorsFile& file, const std::string& path, const TransformerConfig& c) {
  c.validate();
  const std::string why = generator_unsupported(c);
  ENG_CHECK(why.empty(), "Generator: ", path, ": the model has ", why, "; LanguageModel::step runs it");
  // The options the variant reads (models/attention/softmax.cpp, linear.cpp), with its checks and errors.
  AttentionOptions options = c.attention_options;
  options.set_variant(c.attention);
  GeneratorWeights w = generator_shape(c);
  const int64_t head_dim = c.d_model / c.heads;
  if (w.linear) {
    w.relu_features = options.get_string("feature_map", "elu") == "relu";
    w.linear_eps = float(options.get_double("eps", 1e-6, RealRange::at_least(0)));
  } else {
    const std::string impl = options.get_string("impl", "auto");
    ENG_CHECK(impl == "auto" || impl == "flash" || impl == "naive",
              "attention 'softmax': option impl must be auto, flash or naive, got '", impl, "'");
    const double scale = options.get_double("scale", 0.0, RealRange::above(0));
    w.softmax_scale = float(scale > 0 ? scale : 1.0 / std::sqrt(double(head_dim)));
  }
  options.check_all_used(c.attention);

  const CheckedTensors t = check_checkpoint_tensors(file, path, language_model_spec(c));
  auto tensor = [&](const std::string& name) {  // an f32 parameter in another dtype is converted, as bind_checkpoint does
    const Tensor& x = t.by_name.at("model." + name);
    return t.quantized.count(name) || x.dtype() == DType::F32 ? x : x.to(DType::F32);
  };
  auto product = [&](const std::string& name) {
    GeneratorWeights::Product p;
    p.weight = tensor(name + ".weight");
    if (c.bias) p.bias = tensor(name + ".bias");
    return p;
  };
  auto norm = [&](const std::string& name) {
    GeneratorWeights::NormWeights n;
    n.rms = c.rms_norm;
    n.eps = float(c.norm_eps > 0 ? c.norm_eps : c.rms_norm ? 1e-6 : 1e-5);  // Norm's defaults (models/norm_layers.h)
    n.weight = tensor(name + (c.rms_norm ? ".rms.weight" : ".ln.weight"));
    if (!c.rms_norm) n.bias = tensor(name + ".ln.bias");
    return n;
  };
  w.tokens = tensor("embed.tokens.weight");
  if (c.positional == PositionalKind::Learned) w.positions = tensor("embed.positions.weight");
  for (int64_t i = 0; i < std::max(c.encoder_layers, c.decoder_layers); ++i) {
    const std::string layer = "layers" + std::to_string(i);
    w.layers.push_back({norm(layer + ".norm1"), norm(layer + ".norm2"), product(layer + ".self_attn.q_proj"),
                        product(layer + ".self_attn.k_proj"), product(layer + ".self_attn.v_proj"),
                        product(layer + ".self_attn.out_proj"), product(layer + ".ffn.fc1"),
                        product(layer + ".ffn.fc2"),
                        activation_is_gated(c.activation) ? product(layer + ".ffn.fc3") : GeneratorWeights::Product()});
  }
  if (c.pre_norm) {
    w.final_norm = true;
    w.final = norm("final_norm");
  }
  if (!c.tie_embeddings) w.head = product("head");
  return w;
}

}  // namespace eng
