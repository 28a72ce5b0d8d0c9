// Training checkpoints: one safetensors file (engine/safetensors.h) holding the model's parameters
// under "model.<parameter name>", the optimizer's state under "optim.<kind>.<parameter name>", and
// string metadata (training step, generator positions, the model config as "config.<key>", the task's as
// "task.<key>"). docs/checkpoint.md lists every key. Writes are atomic (temp file + rename).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/optim.h"
#include "engine/safetensors.h"
#include "models/module.h"

namespace eng {

void save_checkpoint(const std::string& path, const Module& model, const Optimizer* optimizer,
                     const std::map<std::string, std::string>& metadata);

// Loads parameters (and optimizer state when `optimizer` is given) in place and returns the metadata.
// Every parameter must be present with its shape, and no unknown "model." key may appear; errors name
// the file and the tensor. Nothing is changed when any check fails. Quantized parameters (models/quantized.h) are
// taken as they are in the file, and only without an optimizer: such a file is for inference.
std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& model, Optimizer* optimizer);
// The same from a file already read (load_safetensors, or map_safetensors: the copies then come from the
// mapping), so that a program reading the config from the metadata reads the file once.
std::map<std::string, std::string> load_checkpoint(const SafetensorsFile& file, const std::string& path,
                                                   Module& model, Optimizer* optimizer);

// What a checkpoint must hold for a model, which every load checks the file against: each parameter's name, its
// f32 shape ([N, K] for a quantized weight too), its dtype in the model (F32, or U8 once quantized) and whether its
// layer may hold it quantized; each buffer's name, dtype and shape.
struct TensorSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  bool quantizable = false;
};
struct ModelSpec {
  std::vector<TensorSpec> parameters, buffers;
};
ModelSpec model_spec(const Module& model);

// The checks every load makes before it changes anything: the data's CRC-32, every parameter and buffer of `spec`
// present with its shape (a buffer with its dtype too; a quantized parameter as valid blocks in its recorded format),
// no unknown "model." or "buffer." tensor. Throws naming `path` and the tensor. Returns the file's tensors by name
// and the names (without "model.") of the parameters the file holds quantized.
struct CheckedTensors {
  std::map<std::string, Tensor> by_name;
  std::set<std::string> quantized;
};
CheckedTensors check_checkpoint_tensors(const SafetensorsFile& file, const std::string& path, const ModelSpec& spec);

// Inference load, zero copy: after the same checks as load_checkpoint (nothing changed when one fails), each
// parameter becomes the file's tensor itself, viewed by the layers' handles, and stops requiring grad; with a
// mapped or buffer file (engine/safetensors.h) the weights are read-only views, so the model is not trained.
// A parameter of another dtype than the file's gets a converted copy; buffers are copied (layers may update them).
// Optimizer state in the file is ignored.
void bind_checkpoint(const SafetensorsFile& file, const std::string& path, Module& model);

// Writes an inference-only checkpoint: `file`'s parameters and buffers ("model.*", "buffer.*") and its metadata,
// without the optimizer state and its keys, with the CRC-32 of what is written (docs/checkpoint.md).
void save_inference_checkpoint(const std::string& path, const SafetensorsFile& file);

// The CRC-32 save_checkpoint records over the tensor data ("checksum.crc32") beside the one the data has now.
// recorded is "" for a file that save_checkpoint did not write; a damaged header can drop the key too.
struct ChecksumCheck {
  std::string recorded, actual;  // 8 hex digits each
  bool intact() const { return recorded == actual; }
};
ChecksumCheck check_checksum(const SafetensorsFile& file);

// What a run of train records of its configuration, keys without their prefix: the model's ("config.<key>",
// TransformerConfig::to_map) and the task's ("task.<key>": "name", then the task's own keys, e.g. "symbols").
// Checkpoints written before the task had a prefix of its own hold its keys under "config." too, the name as
// "config.task": read_run_config reads that old form as well, so such checkpoints load and resume unchanged.
struct RunConfig {
  std::map<std::string, std::string> model, task;
  bool old_form = false;  // the task's keys were read from "config."
};
RunConfig read_run_config(const std::map<std::string, std::string>& metadata);
// The metadata entries of `c` as train writes them (always the new form).
std::map<std::string, std::string> run_config_metadata(const RunConfig& c);

// Throws naming the file and the first differing key when the checkpoint's model config (read_run_config)
// differs from `config` (a checkpoint of another model), including a key only one of them has.
void check_checkpoint_config(const std::string& path, const std::map<std::string, std::string>& metadata,
                             const std::map<std::string, std::string>& config);
// The same for the task's keys ("name" and the task's own). A key only the checkpoint has is a difference,
// except in the old form: train then wrote symbols and fixed_length also for tasks that do not read them.
void check_checkpoint_task(const std::string& path, const std::map<std::string, std::string>& metadata,
                           const std::map<std::string, std::string>& task);

}  // namespace eng
