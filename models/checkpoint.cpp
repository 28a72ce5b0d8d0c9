#include "models/checkpoint.h"

#include <cstdio>
#include <set>

#include "engine/checksum.h"
#include "engine/error.h"
#include "engine/parse_number.h"
#include "engine/safe_text.h"
#include "engine/safetensors.h"
#include "models/quantized.h"

namespace eng {

namespace {

constexpr const char* kChecksumKey = "checksum.crc32";

// CRC-32 of every tensor's bytes in file order, as 8 hex digits: the header is validated field by field
// on load, but a flipped bit in the data would otherwise load as a plausible wrong weight.
std::string data_checksum(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  uint32_t crc = 0;
  for (const auto& [name, t] : tensors) {
    const Tensor c = t.detach().contiguous();
    crc = crc32(static_cast<const uint8_t*>(c.raw_data()), size_t(c.numel()) * dtype_size(c.dtype()), crc);
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", unsigned(crc));
  return hex;
}

}  // namespace

void save_checkpoint(const std::string& path, const Module& model, const Optimizer* optimizer,
                     const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, p] : model.named_parameters()) tensors.emplace_back("model." + name, p.detach());
  for (const auto& [name, b] : model.named_buffers()) tensors.emplace_back("buffer." + name, b);
  if (optimizer)
    for (const auto& [name, s] : optimizer->state()) tensors.emplace_back(name, s);
  ENG_CHECK(!metadata.count(kChecksumKey), "checkpoint ", path, ": metadata key '", kChecksumKey, "' is reserved");
  std::map<std::string, std::string> meta = metadata;
  meta[kChecksumKey] = data_checksum(tensors);
  if (optimizer) {
    meta["optimizer"] = optimizer->name();
    meta["optimizer_steps"] = std::to_string(optimizer->steps());
  }
  save_safetensors(path, tensors, meta);
}

ChecksumCheck check_checksum(const SafetensorsFile& file) {
  auto sum = file.metadata.find(kChecksumKey);
  return {sum == file.metadata.end() ? "" : sum->second, data_checksum(file.tensors)};
}

ModelSpec model_spec(const Module& model) {
  ModelSpec spec;
  std::set<std::string> quantizable;
  for (const auto& [name, p] : model.named_quantizable()) quantizable.insert(name);
  for (const auto& [name, p] : model.named_parameters())
    spec.parameters.push_back({name, quant_logical_shape(p), p.dtype(), quantizable.count(name) > 0});
  for (const auto& [name, b] : model.named_buffers()) spec.buffers.push_back({name, b.shape(), b.dtype(), false});
  return spec;
}

CheckedTensors check_checkpoint_tensors(const SafetensorsFile& f, const std::string& path, const ModelSpec& spec) {
  const ChecksumCheck sum = check_checksum(f);
  ENG_CHECK(!sum.recorded.empty(), "checkpoint ", path, ": no '", kChecksumKey,
            "' metadata (not written by save_checkpoint, or its header was damaged)");
  ENG_CHECK(sum.intact(), "checkpoint ", path, ": the tensor data is corrupt (CRC-32 ", sum.actual,
            ", the header records ", sum.recorded, ")");
  CheckedTensors out;
  out.by_name = std::map<std::string, Tensor>(f.tensors.begin(), f.tensors.end());
  std::set<std::string> expected;
  for (const TensorSpec& p : spec.parameters) {
    const std::string& name = p.name;
    expected.insert("model." + name);
    auto it = out.by_name.find("model." + name);
    ENG_CHECK(it != out.by_name.end(), "checkpoint ", path, ": parameter '", name, "' is missing");
    if (check_quantized_parameter(path, name, p.shape, it->second, p.quantizable, f.metadata)) {
      out.quantized.insert(name);
      continue;
    }
    ENG_CHECK(p.dtype != DType::U8, "checkpoint ", path, ": parameter '", name, "' is f32 in the file but ",
              "quantized in the model: load it into a model that was not quantized");
    ENG_CHECK(it->second.shape() == p.shape, "checkpoint ", path, ": parameter '", name, "' has shape ",
              it->second.shape(), ", the model has ", p.shape);
  }
  check_quant_keys(path, f.metadata, std::vector<std::string>(expected.begin(), expected.end()));
  for (const TensorSpec& b : spec.buffers) {
    expected.insert("buffer." + b.name);
    auto it = out.by_name.find("buffer." + b.name);
    ENG_CHECK(it != out.by_name.end(), "checkpoint ", path, ": buffer '", b.name, "' is missing");
    ENG_CHECK(it->second.shape() == b.shape && it->second.dtype() == b.dtype, "checkpoint ", path, ": buffer '",
              b.name, "' is ", dtype_name(it->second.dtype()), " ", it->second.shape(), ", the model has ",
              dtype_name(b.dtype), " ", b.shape);
  }
  for (const auto& [name, t] : f.tensors) {
    const bool param = name.rfind("model.", 0) == 0, buffer = name.rfind("buffer.", 0) == 0;
    ENG_CHECK(!(param || buffer) || expected.count(name), "checkpoint ", path, ": unknown ",
              param ? "parameter" : "buffer", " '", terminal_text(name.substr(param ? 6 : 7)),
              "' (a checkpoint of another model?)");
  }
  return out;
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& model, Optimizer* optimizer) {
  return load_checkpoint(load_safetensors(path), path, model, optimizer);
}

std::map<std::string, std::string> load_checkpoint(const SafetensorsFile& f, const std::string& path, Module& model,
                                                   Optimizer* optimizer) {
  ENG_CHECK(!(optimizer && has_quantized_weights(f.metadata)), "checkpoint ", path, ": holds quantized weights (an ",
            "inference-only file written by quantize): training resumes from an f32 checkpoint");
  const CheckedTensors checked = check_checkpoint_tensors(f, path, model_spec(model));
  if (optimizer) {
    auto it = f.metadata.find("optimizer");
    ENG_CHECK(it != f.metadata.end() && it->second == optimizer->name(), "checkpoint ", path,
              ": optimizer state is for '", it == f.metadata.end() ? "none" : terminal_text(it->second), "', not '",
              optimizer->name(), "'");
    auto steps_text = f.metadata.find("optimizer_steps");
    ENG_CHECK(steps_text != f.metadata.end(), "checkpoint ", path, ": metadata 'optimizer_steps' is missing");
    const int64_t steps =
        parse_int(steps_text->second, IntRange::at_least(0), "checkpoint " + path + ": metadata 'optimizer_steps'");
#if defined(__cpp_exceptions)
    try {
      optimizer->load_state(f.tensors, steps);
    } catch (const Error& e) {
      fail("checkpoint ", path, ": ", e.what());
    }
#else
    optimizer->load_state(f.tensors, steps);  // the handler gets the optimizer's message alone
#endif
  }
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor& t = checked.by_name.at("model." + name);
    checked.quantized.count(name) ? adopt_quantized(p, t) : p.copy_from(t);
  }
  for (const auto& [name, b] : model.named_buffers()) b.copy_from(checked.by_name.at("buffer." + name));
  return f.metadata;
}

void bind_checkpoint(const SafetensorsFile& f, const std::string& path, Module& model) {
  const CheckedTensors checked = check_checkpoint_tensors(f, path, model_spec(model));
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor& src = checked.by_name.at("model." + name);
    if (checked.quantized.count(name)) {
      adopt_quantized(p, src);
      continue;
    }
    const Tensor t = src.dtype() == p.dtype() ? src : src.to(p.dtype());
    TensorImpl* impl = p.impl();  // the handles the layers hold see the file's tensor
    impl->storage = t.storage();
    impl->strides = t.strides();
    impl->offset = t.offset();
    impl->requires_grad = false;
    impl->grad.reset();
  }
  for (const auto& [name, b] : model.named_buffers()) b.copy_from(checked.by_name.at("buffer." + name));
}

void save_inference_checkpoint(const std::string& path, const SafetensorsFile& f) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind("model.", 0) == 0 || name.rfind("buffer.", 0) == 0) tensors.emplace_back(name, t);
  std::map<std::string, std::string> meta = f.metadata;
  for (const char* key : {"optimizer", "optimizer_steps"}) meta.erase(key);
  meta[kChecksumKey] = data_checksum(tensors);
  save_safetensors(path, tensors, meta);
}

namespace {

// The task's keys as train wrote them under "config." before they had a prefix of their own. The list is closed:
// since then a task's keys are written only as "task.<key>".
bool old_form_task_key(const std::string& key) {
  for (const char* k : {"task", "symbols", "fixed_length", "phonemes", "features", "noise", "min_labels",
                        "max_labels", "min_duration", "max_duration", "patch"})
    if (key == k) return true;
  return false;
}

// `wanted` against `recorded` (both without prefix), naming a key as `prefix` + key; a key only `recorded` has
// is a difference unless `extra_allowed`.
void check_keys(const std::string& path, const std::map<std::string, std::string>& recorded,
                const std::map<std::string, std::string>& wanted, const std::string& prefix, bool extra_allowed) {
  for (const auto& [k, v] : wanted) {
    auto it = recorded.find(k);
    ENG_CHECK(it != recorded.end(), "checkpoint ", path, ": no ", prefix.empty() ? "config" : "task", " key '",
              prefix, k, "' (not a checkpoint of this tool?)");
    ENG_CHECK(it->second == v, "checkpoint ", path, " is for a different model: ", prefix, k, " = ",
              terminal_text(it->second), " in the checkpoint, ", v, " requested");
  }
  // Keys written only when they differ from a default (kv_heads, reversible) must not be silently dropped.
  if (extra_allowed) return;
  for (const auto& [key, value] : recorded)
    ENG_CHECK(wanted.count(key), "checkpoint ", path, " is for a different model: ", prefix, terminal_text(key),
              " = ", terminal_text(value), " in the checkpoint, not set in the requested ",
              prefix.empty() ? "model" : "task");
}

}  // namespace

RunConfig read_run_config(const std::map<std::string, std::string>& metadata) {
  RunConfig c;
  c.old_form = metadata.count("config.task") > 0;
  for (const auto& [key, value] : metadata) {
    if (key.rfind("task.", 0) == 0) {
      c.task[key.substr(5)] = value;
    } else if (key.rfind("config.", 0) == 0) {
      const std::string k = key.substr(7);
      if (c.old_form && old_form_task_key(k))
        c.task[k == "task" ? "name" : k] = value;
      else
        c.model[k] = value;
    }
  }
  return c;
}

std::map<std::string, std::string> run_config_metadata(const RunConfig& c) {
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : c.model) meta["config." + k] = v;
  for (const auto& [k, v] : c.task) meta["task." + k] = v;
  return meta;
}

void check_checkpoint_config(const std::string& path, const std::map<std::string, std::string>& metadata,
                             const std::map<std::string, std::string>& config) {
  check_keys(path, read_run_config(metadata).model, config, "", false);
}

void check_checkpoint_task(const std::string& path, const std::map<std::string, std::string>& metadata,
                           const std::map<std::string, std::string>& task) {
  const RunConfig recorded = read_run_config(metadata);
  check_keys(path, recorded.task, task, "task.", recorded.old_form);
}

}  // namespace eng
