// Import of published checkpoints into engine checkpoints (models/checkpoint.h), for `build/convert`:
//   Hugging Face: a directory with config.json and model.safetensors, or sharded model-0000K-of-0000N.safetensors
//     with model.safetensors.index.json; F32, F16 or BF16 tensors (read as F32); GPT2LMHeadModel and
//     LlamaForCausalLM (models/import/hf.cpp holds the name mappings).
//   llama2.c: its legacy .bin (7 int32 then the f32 weights in run.c's order, models/import/llama2c.cpp).
// Every refusal names the file and the reason: an unknown architecture or config value, a missing, unexpected or
// misshapen tensor, an unsupported dtype. docs/model.md gives the configs the imports produce.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "models/transformer.h"

namespace eng {

struct ImportedModel {
  TransformerConfig config;  // a decoder-only language model
  // Our parameter names (LanguageModel::named_parameters(), without "model."), each a contiguous f32 tensor.
  std::vector<std::pair<std::string, Tensor>> params;
  std::string source;  // "hf:GPT2LMHeadModel", "hf:LlamaForCausalLM", "llama2c"
};

ImportedModel import_hf(const std::string& dir);
ImportedModel import_llama2c(const std::string& path);

// Builds the model, loads the parameters (every one present with its shape, no extra one) and writes the checkpoint
// with the config as "config.*" metadata and "import.source"; `where` names the source in errors.
void save_imported(const std::string& out, const ImportedModel& m, const std::string& where);

}  // namespace eng
