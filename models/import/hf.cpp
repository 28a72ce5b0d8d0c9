// Hugging Face checkpoints: config.json, then the tensors of one file or of the shards an index names, mapped onto
// our parameter names.
//   GPT2LMHeadModel: Conv1D weights are stored [in, out] (x W + b) and are transposed to our [out, in]; c_attn holds
//     q, k and v side by side along its output. The causal-mask buffers (attn.bias, attn.masked_bias) are skipped,
//     and names may or may not carry the "transformer." prefix (GPT2Model saves them without).
//   LlamaForCausalLM: q_proj and k_proj rows are already in the rotate-half layout (Hugging Face's conversion
//     permutes Meta's interleaved rows), our default pairing: copied as they are.
#include <filesystem>
#include <map>
#include <set>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/json.h"
#include "engine/safetensors.h"
#include "models/import/import.h"
#include "ops/view.h"

namespace eng {

namespace {

std::string join(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

Json read_json(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, "convert");
  try {
    return Json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const Error& e) {
    fail("convert: ", path, ": ", e.what());
  }
}

// config.json's fields, each refusal naming the file and the key.
class Config {
 public:
  Config(std::string path, Json j) : path_(std::move(path)), j_(std::move(j)) {
    ENG_CHECK(j_.is_object(), "convert: ", path_, ": not a JSON object");
  }
  const std::string& path() const { return path_; }
  const Json* find(const std::string& key) const {
    const Json* v = j_.find(key);
    return v && !v->is_null() ? v : nullptr;
  }
  int64_t integer(const std::string& key) const {
    const Json* v = find(key);
    ENG_CHECK(v, "convert: ", path_, ": '", key, "' is missing");
    ENG_CHECK(v->is_int() && v->as_int() >= 1, "convert: ", path_, ": '", key, "' must be a positive integer, got ",
              v->dump());
    return v->as_int();
  }
  int64_t integer(const std::string& key, int64_t def) const { return find(key) ? integer(key) : def; }
  double real(const std::string& key, double def) const {
    const Json* v = find(key);
    if (!v) return def;
    ENG_CHECK(v->is_number() && v->as_double() > 0, "convert: ", path_, ": '", key, "' must be a positive number, got ",
              v->dump());
    return v->as_double();
  }
  bool flag(const std::string& key, bool def) const {
    const Json* v = find(key);
    if (!v) return def;
    ENG_CHECK(v->is_bool(), "convert: ", path_, ": '", key, "' must be true or false, got ", v->dump());
    return v->as_bool();
  }
  std::string text(const std::string& key, const std::string& def) const {
    const Json* v = find(key);
    if (!v) return def;
    ENG_CHECK(v->is_string(), "convert: ", path_, ": '", key, "' must be a string, got ", v->dump());
    return v->as_string();
  }
  void require(const std::string& key, bool ok, const std::string& why) const {
    ENG_CHECK(ok, "convert: ", path_, ": ", key, " = ", find(key) ? find(key)->dump() : "(absent)",
              " is not supported (", why, ")");
  }

 private:
  std::string path_;
  Json j_;
};

// The checkpoint's tensors by name, each with the file it came from; names taken are ticked off so that the rest
// can be refused as unexpected.
class Tensors {
 public:
  explicit Tensors(const std::string& dir) : dir_(dir) {
    const std::string single = join(dir, "model.safetensors"), index = join(dir, "model.safetensors.index.json");
    if (file_kind(single) == "a regular file") {
      add(single);
    } else if (file_kind(index) == "a regular file") {
      const Json j = read_json(index);
      const Json* map = j.is_object() ? j.find("weight_map") : nullptr;
      ENG_CHECK(map && map->is_object(), "convert: ", index, ": no \"weight_map\" object");
      std::set<std::string> files;
      for (const auto& [name, file] : map->as_object()) {
        ENG_CHECK(file.is_string() && file.as_string().find('/') == std::string::npos, "convert: ", index,
                  ": the file of '", name, "' must be a file name in the same directory, got ", file.dump());
        files.insert(file.as_string());
      }
      for (const std::string& f : files) add(join(dir, f));
      for (const auto& [name, file] : map->as_object())
        ENG_CHECK(by_name_.count(name) && by_name_.at(name).second == join(dir, file.as_string()), "convert: ", index,
                  ": '", name, "' is not in ", file.as_string(), " as the index says");
    } else {
      fail("convert: ", dir, ": neither model.safetensors nor model.safetensors.index.json is there (pytorch_model.bin "
           "is not read: save the model with safetensors)");
    }
  }

  // The tensor `name` with the shape the config implies.
  Tensor take(const std::string& name, const Shape& shape) {
    auto it = by_name_.find(name);
    ENG_CHECK(it != by_name_.end(), "convert: ", dir_, ": tensor '", name, "' is missing");
    const auto& [t, file] = it->second;
    ENG_CHECK(t.shape() == shape, "convert: ", file, ": tensor '", name, "' has shape ", t.shape(),
              ", config.json implies ", shape);
    ENG_CHECK(t.dtype() == DType::F32, "convert: ", file, ": tensor '", name, "' is ", dtype_name(t.dtype()),
              ", not a floating-point type (F32, F16 or BF16)");
    taken_.insert(name);
    return t;
  }
  bool has(const std::string& name) const { return by_name_.count(name) > 0; }
  void skip(const std::string& name) { taken_.insert(name); }

  // Every tensor was taken or skipped: one left over belongs to a model the config does not describe.
  void check_all_taken() const {
    for (const auto& [name, entry] : by_name_)
      ENG_CHECK(taken_.count(name), "convert: ", entry.second, ": unexpected tensor '", name,
                "' (the config.json describes a model without it)");
  }

 private:
  void add(const std::string& file) {
    for (auto& [name, t] : load_safetensors(file).tensors) {
      ENG_CHECK(!by_name_.count(name), "convert: ", file, ": tensor '", name, "' is also in ",
                by_name_.at(name).second);
      by_name_.emplace(name, std::make_pair(t, file));
    }
  }
  std::string dir_;
  std::map<std::string, std::pair<Tensor, std::string>> by_name_;
  std::set<std::string> taken_;
};

Tensor rows(const Tensor& t, int64_t begin, int64_t count) { return narrow(t, 0, begin, count).contiguous(); }
Tensor transposed(const Tensor& t) { return transpose(t, 0, 1).contiguous(); }

ImportedModel gpt2(const Config& c, Tensors& w) {
  ImportedModel m;
  m.source = "hf:GPT2LMHeadModel";
  TransformerConfig& t = m.config;
  t.vocab = c.integer("vocab_size");
  t.d_model = c.integer("n_embd");
  t.heads = c.integer("n_head");
  t.decoder_layers = c.integer("n_layer");
  t.max_len = c.integer("n_positions");
  t.d_ff = c.integer("n_inner", 4 * t.d_model);
  t.norm_eps = c.real("layer_norm_epsilon", 1e-5);
  const std::string act = c.text("activation_function", "gelu_new");
  c.require("activation_function", act == "gelu_new" || act == "gelu" || act == "relu", "gelu_new, gelu or relu");
  t.activation = act == "gelu_new" ? Activation::GeluTanh : act == "gelu" ? Activation::Gelu : Activation::Relu;
  c.require("tie_word_embeddings", c.flag("tie_word_embeddings", true), "GPT-2's head is its token embedding");
  c.require("scale_attn_weights", c.flag("scale_attn_weights", true), "attention scaled by 1/sqrt(head_dim)");
  c.require("scale_attn_by_inverse_layer_idx", !c.flag("scale_attn_by_inverse_layer_idx", false), "no layer scaling");
  t.positional = PositionalKind::Learned;
  t.tie_embeddings = true;
  t.embed_scale = 1;
  t.pre_norm = true;
  t.dropout = 0;
  t.validate();

  const int64_t d = t.d_model, f = t.d_ff;
  const std::string pre = w.has("transformer.wte.weight") ? "transformer." : "";
  auto add = [&](const std::string& ours, const Tensor& x) { m.params.emplace_back(ours, x); };
  add("embed.tokens.weight", w.take(pre + "wte.weight", {t.vocab, d}));
  add("embed.positions.weight", w.take(pre + "wpe.weight", {t.max_len, d}));
  for (int64_t i = 0; i < t.decoder_layers; ++i) {
    const std::string h = pre + "h." + std::to_string(i) + ".", l = "layers" + std::to_string(i) + ".";
    add(l + "norm1.ln.weight", w.take(h + "ln_1.weight", {d}));
    add(l + "norm1.ln.bias", w.take(h + "ln_1.bias", {d}));
    const Tensor qkv = transposed(w.take(h + "attn.c_attn.weight", {d, 3 * d}));  // [3d, d]: q, k, v rows
    const Tensor qkv_b = w.take(h + "attn.c_attn.bias", {3 * d});
    const char* names[] = {"q_proj", "k_proj", "v_proj"};
    for (int64_t j = 0; j < 3; ++j) {
      add(l + "self_attn." + names[j] + ".weight", rows(qkv, j * d, d));
      add(l + "self_attn." + names[j] + ".bias", rows(qkv_b, j * d, d));
    }
    add(l + "self_attn.out_proj.weight", transposed(w.take(h + "attn.c_proj.weight", {d, d})));
    add(l + "self_attn.out_proj.bias", w.take(h + "attn.c_proj.bias", {d}));
    add(l + "norm2.ln.weight", w.take(h + "ln_2.weight", {d}));
    add(l + "norm2.ln.bias", w.take(h + "ln_2.bias", {d}));
    add(l + "ffn.fc1.weight", transposed(w.take(h + "mlp.c_fc.weight", {d, f})));
    add(l + "ffn.fc1.bias", w.take(h + "mlp.c_fc.bias", {f}));
    add(l + "ffn.fc2.weight", transposed(w.take(h + "mlp.c_proj.weight", {f, d})));
    add(l + "ffn.fc2.bias", w.take(h + "mlp.c_proj.bias", {d}));
    for (const char* buffer : {"attn.bias", "attn.masked_bias"}) w.skip(h + buffer);
  }
  add("final_norm.ln.weight", w.take(pre + "ln_f.weight", {d}));
  add("final_norm.ln.bias", w.take(pre + "ln_f.bias", {d}));
  w.skip("lm_head.weight");  // when saved at all, a copy of wte (tie_word_embeddings)
  return m;
}

ImportedModel llama(const Config& c, Tensors& w) {
  ImportedModel m;
  m.source = "hf:LlamaForCausalLM";
  TransformerConfig& t = m.config;
  t.vocab = c.integer("vocab_size");
  t.d_model = c.integer("hidden_size");
  t.heads = c.integer("num_attention_heads");
  t.kv_heads = c.integer("num_key_value_heads", t.heads);
  t.decoder_layers = c.integer("num_hidden_layers");
  t.d_ff = c.integer("intermediate_size");
  t.max_len = c.integer("max_position_embeddings", 2048);
  t.norm_eps = c.real("rms_norm_eps", 1e-6);
  t.rope_theta = c.real("rope_theta", 10000);
  t.tie_embeddings = c.flag("tie_word_embeddings", false);
  c.require("hidden_act", c.text("hidden_act", "silu") == "silu", "SwiGLU's silu only");
  c.require("attention_bias", !c.flag("attention_bias", false), "no biases");
  c.require("mlp_bias", !c.flag("mlp_bias", false), "no biases");
  c.require("rope_scaling", c.find("rope_scaling") == nullptr, "plain RoPE only");
  ENG_CHECK(t.d_model % t.heads == 0, "convert: ", c.path(), ": hidden_size ", t.d_model,
            " is not divisible by num_attention_heads ", t.heads);
  c.require("head_dim", c.integer("head_dim", t.d_model / t.heads) == t.d_model / t.heads,
            "head_dim = hidden_size / num_attention_heads only");
  t.positional = PositionalKind::Rotary;
  t.rope_pairing = RopePairing::RotateHalf;
  t.rms_norm = true;
  t.activation = Activation::SwiGLU;
  t.bias = false;
  t.embed_scale = 1;
  t.pre_norm = true;
  t.dropout = 0;
  t.validate();

  const int64_t d = t.d_model, kv = d / t.heads * t.kv_heads, f = t.d_ff;
  auto add = [&](const std::string& ours, const Tensor& x) { m.params.emplace_back(ours, x); };
  add("embed.tokens.weight", w.take("model.embed_tokens.weight", {t.vocab, d}));
  for (int64_t i = 0; i < t.decoder_layers; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", l = "layers" + std::to_string(i) + ".";
    add(l + "norm1.rms.weight", w.take(h + "input_layernorm.weight", {d}));
    add(l + "self_attn.q_proj.weight", w.take(h + "self_attn.q_proj.weight", {d, d}));
    add(l + "self_attn.k_proj.weight", w.take(h + "self_attn.k_proj.weight", {kv, d}));
    add(l + "self_attn.v_proj.weight", w.take(h + "self_attn.v_proj.weight", {kv, d}));
    add(l + "self_attn.out_proj.weight", w.take(h + "self_attn.o_proj.weight", {d, d}));
    add(l + "norm2.rms.weight", w.take(h + "post_attention_layernorm.weight", {d}));
    add(l + "ffn.fc1.weight", w.take(h + "mlp.gate_proj.weight", {f, d}));
    add(l + "ffn.fc3.weight", w.take(h + "mlp.up_proj.weight", {f, d}));
    add(l + "ffn.fc2.weight", w.take(h + "mlp.down_proj.weight", {d, f}));
    w.skip(h + "self_attn.rotary_emb.inv_freq");  // a buffer older saves include
  }
  add("final_norm.rms.weight", w.take("model.norm.weight", {d}));
  if (t.tie_embeddings) w.skip("lm_head.weight");
  else add("head.weight", w.take("lm_head.weight", {t.vocab, d}));
  return m;
}

}  // namespace

ImportedModel import_hf(const std::string& dir) {
  const std::string config_path = join(dir, "config.json");
  ENG_CHECK(file_kind(config_path) == "a regular file", "convert: ", config_path, ": no such file (",
            file_kind(dir).empty() ? "the directory does not exist" : "a Hugging Face model directory has one", ")");
  const Config c(config_path, read_json(config_path));
  const Json* archs = c.find("architectures");
  std::string arch;
  if (archs && archs->is_array() && archs->as_array().size() == 1 && archs->as_array()[0].is_string())
    arch = archs->as_array()[0].as_string();
  else
    ENG_CHECK(!archs, "convert: ", config_path, ": 'architectures' must list one name, got ", archs->dump());
  const std::string type = c.text("model_type", "");
  if (arch.empty()) arch = type == "gpt2" ? "GPT2LMHeadModel" : type == "llama" ? "LlamaForCausalLM" : "";
  ENG_CHECK(arch == "GPT2LMHeadModel" || arch == "LlamaForCausalLM", "convert: ", config_path, ": architecture '",
            arch.empty() ? type : arch, "' is not supported (GPT2LMHeadModel, LlamaForCausalLM)");
  Tensors w(dir);
  ImportedModel m = arch == "GPT2LMHeadModel" ? gpt2(c, w) : llama(c, w);
  w.check_all_taken();
  return m;
}

}  // namespace eng
