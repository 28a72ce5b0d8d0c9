// Token embedding: ids (i64, any shape) -> vectors [..., dim]. Initialised N(0, 1) like PyTorch's
// nn.Embedding; models that want a smaller scale pass `init_std`. For inference the table may be quantized
// (models/quantized.h): its rows are then dequantized as they are looked up.
#pragma once
#include "engine/rng.h"
#include "models/module.h"

namespace eng {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Rng& rng, double init_std = 1.0);
  Tensor forward(const Tensor& ids) const;
  int64_t num_embeddings() const { return weight.size(0); }

  Tensor weight;  // [num_embeddings, dim]
};

}  // namespace eng
