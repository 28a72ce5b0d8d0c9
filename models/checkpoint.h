// Training checkpoints: one safetensors file (engine/safetensors.h) holding the model's parameters
// under "model.<parameter name>", the optimizer's state under "optim.<kind>.<parameter name>", and
// string metadata (training step, generator positions, the model config as "config.<key>").
// docs/checkpoint.md lists every key. Writes are atomic (temp file + rename).
#pragma once
#include <map>
#include <string>

#include "engine/optim.h"
#include "engine/safetensors.h"
#include "models/module.h"

namespace eng {

void save_checkpoint(const std::string& path, const Module& model, const Optimizer* optimizer,
                     const std::map<std::string, std::string>& metadata);

// Loads parameters (and optimizer state when `optimizer` is given) in place and returns the metadata.
// Every parameter must be present with its shape, and no unknown "model." key may appear; errors name
// the file and the tensor. Nothing is changed when any check fails.
std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& model, Optimizer* optimizer);

// The CRC-32 save_checkpoint records over the tensor data ("checksum.crc32") beside the one the data has now.
// recorded is "" for a file that save_checkpoint did not write; a damaged header can drop the key too.
struct ChecksumCheck {
  std::string recorded, actual;  // 8 hex digits each
  bool intact() const { return recorded == actual; }
};
ChecksumCheck check_checksum(const SafetensorsFile& file);

// Throws naming the file and the first differing key when the checkpoint's "config.*" metadata differs
// from `config` (a checkpoint of another model), including a key only one of them has.
void check_checkpoint_config(const std::string& path, const std::map<std::string, std::string>& metadata,
                             const std::map<std::string, std::string>& config);

}  // namespace eng
