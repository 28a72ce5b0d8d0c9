// A Generator's weights straight from a checkpoint (models/checkpoint.h), without building the LanguageModel it
// describes: the lean embed's path (docs/embedding.md), which then links no layer, attention class or Tensor op,
// only the Generator's kernels. The checkpoint is checked as bind_checkpoint checks it (check_checkpoint_tensors:
// CRC-32, every parameter present with its shape or as valid quantized blocks, no unknown tensor), against the
// names and shapes LanguageModel(config) has (language_model_spec). The suite checks both halves against the built
// model: the same spec as model_spec(LanguageModel(c)), the same verdict as Generator::unsupported (from the
// layers' classes), the same logits.
#pragma once
#include <string>

#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/generator.h"

namespace eng {

// The parameters (names, f32 shapes, quantizable or not) and buffers of LanguageModel(c), for a decoder-only c.
ModelSpec language_model_spec(const TransformerConfig& c);

// The weights of the model `c` describes, as views of `file`'s tensors (a mapped file's pages: nothing is copied
// but an f32 parameter stored in another dtype). Throws naming `path` when the model is unsupported or the file
// does not hold it; reads the attention options as the variant does, so an unknown or invalid one is an error here
// too.
GeneratorWeights generator_weights(const SafetensorsFile& file, const std::string& path, const TransformerConfig& c);

}  // namespace eng
