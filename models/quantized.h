// Inference-only quantized models: every quantizable parameter (Module::named_quantizable: Linear weights and
// embedding tables) whose last dimension is a multiple of 32 replaced in place by its q8_0 or q4_0 blocks
// (ops/quant.h), which Linear and Embedding then read directly; norms, biases, positions and any other parameter
// stay f32. No gradient flows through a quantized weight, and training refuses such a model or checkpoint.
//
// In a checkpoint (docs/checkpoint.md) a quantized parameter "model.<name>" is stored as its u8 blocks
// [N, K/32, B] (safetensors dtype "U8"), and the metadata key "quant.model.<name>" names its format ("q8_0" or
// "q4_0"); a file with such keys holds no optimizer state.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "models/module.h"
#include "ops/quant.h"

namespace eng {

// Quantizes the model's quantizable f32 parameters in place; returns the names quantized. A q4_0 model keeps some
// weights in q8_0 unless `pure` (quant_keeps_q8): the two ends, as ggml's q4_0 files keep the output at higher
// precision, and attention's value and output projections, which carry the attended tokens' content (llama.cpp's
// mixtures give attn_v more bits too). On a trained copy-task model (docs/kernels.md) every weight in q4_0 raised
// the held-out loss by 103 %, the ends in q8_0 by 13 %, these four kinds in q8_0 by 0.4 %; they are 19 % of the
// medium model's weights.
std::vector<std::string> quantize_model(Module& model, QuantFormat f, bool pure = false);
// Whether a q4_0 model (not pure) keeps the parameter `name` in q8_0: a token table ("...embed.tokens.weight"), the
// output head ("head.weight"), an attention's value or output projection ("....v_proj.weight",
// "....out_proj.weight").
bool quant_keeps_q8(const std::string& name);
// "quant.model.<name>" -> format, for each quantized parameter of the model.
std::map<std::string, std::string> quant_metadata(const Module& model);
// Whether a checkpoint's metadata records quantized tensors.
bool has_quantized_weights(const std::map<std::string, std::string>& metadata);

// For load_checkpoint, once per parameter `name` of the model (of f32 shape `shape`) and its tensor in the file (t):
// true when the file holds it quantized, after checking that t is valid blocks of that shape in the recorded format and that the
// layer may hold it quantized (`quantizable`); false for an f32 entry. Throws naming `path` and the parameter
// otherwise, and for a u8 tensor without its "quant." key.
bool check_quantized_parameter(const std::string& path, const std::string& name, const Shape& shape, const Tensor& t,
                               bool quantizable, const std::map<std::string, std::string>& metadata);
// [N, K] of a parameter, f32 or already quantized (its blocks [N, K/32, B]).
Shape quant_logical_shape(const Tensor& p);
// Every "quant." metadata key must name a tensor of the file: throws naming `path` and the key otherwise.
void check_quant_keys(const std::string& path, const std::map<std::string, std::string>& metadata,
                      const std::vector<std::string>& tensor_names);
// Points the parameter p at the quantized blocks t in place (the layers holding p see them).
void adopt_quantized(const Tensor& p, const Tensor& t);

}  // namespace eng
