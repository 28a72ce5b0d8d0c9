#include "models/quantized.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/safe_text.h"

namespace eng {

namespace {

const char* const kPrefix = "quant.";

}  // namespace

Shape quant_logical_shape(const Tensor& p) {
  if (p.dtype() != DType::U8) return p.shape();
  return {p.size(0), p.size(1) * kQuantBlock};
}

void adopt_quantized(const Tensor& p, const Tensor& t) {
  TensorImpl* impl = p.impl();
  impl->storage = t.storage();
  impl->shape = t.shape();
  impl->strides = t.strides();
  impl->offset = t.offset();
  impl->dtype = DType::U8;
  impl->requires_grad = false;
  impl->grad.reset();
}

bool quant_keeps_q8(const std::string& name) {
  auto ends_with = [&name](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return name == "head.weight" || ends_with("embed.tokens.weight") || ends_with(".v_proj.weight") ||
         ends_with(".out_proj.weight");
}

std::vector<std::string> quantize_model(Module& model, QuantFormat f, bool pure) {
  std::vector<std::string> done;
  for (const auto& [name, p] : model.named_quantizable()) {
    if (p.dtype() != DType::F32 || p.dim() != 2 || p.size(1) % kQuantBlock != 0) continue;
    const bool end = f == QuantFormat::Q4_0 && !pure && quant_keeps_q8(name);
    adopt_quantized(p, quantize(p, end ? QuantFormat::Q8_0 : f));
    done.push_back(name);
  }
  return done;
}

std::map<std::string, std::string> quant_metadata(const Module& model) {
  std::map<std::string, std::string> meta;
  for (const auto& [name, p] : model.named_parameters())
    if (p.dtype() == DType::U8) meta[kPrefix + ("model." + name)] = quant_format_name(quant_format_of(p, name));
  return meta;
}

bool has_quantized_weights(const std::map<std::string, std::string>& metadata) {
  auto it = metadata.lower_bound(kPrefix);
  return it != metadata.end() && it->first.rfind(kPrefix, 0) == 0;
}

bool check_quantized_parameter(const std::string& path, const std::string& name, const Shape& want, const Tensor& t,
                               bool quantizable, const std::map<std::string, std::string>& metadata) {
  const std::string where = "checkpoint " + path + ": parameter '" + name + "'";
  const auto it = metadata.find(kPrefix + ("model." + name));
  if (it == metadata.end()) {
    ENG_CHECK(t.dtype() != DType::U8, where, " is u8 but no metadata key '", kPrefix, "model.", name,
              "' gives its format");
    return false;
  }
  QuantFormat f;
  ENG_CHECK(parse_quant_format(it->second, f), where, ": unknown quantized format '", terminal_text(it->second),
            "' (known: q8_0, q4_0)");
  ENG_CHECK(quantizable, where, " cannot be held quantized by its layer (the file records ", it->second, ")");
  ENG_CHECK(want.size() == 2 && want[1] % kQuantBlock == 0, where, " of shape ", want, " cannot be quantized");
  const Shape blocks{want[0], want[1] / kQuantBlock, quant_block_bytes(f)};
  ENG_CHECK(t.dtype() == DType::U8 && t.shape() == blocks, where, ": ", it->second, " blocks of a ", want,
            " weight are u8 ", blocks, ", the file holds ", dtype_name(t.dtype()), " ", t.shape());
  validate_quantized(t, f, where);
  return true;
}

void check_quant_keys(const std::string& path, const std::map<std::string, std::string>& metadata,
                      const std::vector<std::string>& tensor_names) {
  for (auto it = metadata.lower_bound(kPrefix); it != metadata.end() && it->first.rfind(kPrefix, 0) == 0; ++it) {
    const std::string tensor = it->first.substr(std::string(kPrefix).size());
    ENG_CHECK(std::find(tensor_names.begin(), tensor_names.end(), tensor) != tensor_names.end(), "checkpoint ", path,
              ": metadata key '", terminal_text(it->first), "' names no parameter of the model");
  }
}

}  // namespace eng
