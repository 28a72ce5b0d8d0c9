#include "models/embedding.h"

#include "engine/autograd.h"
#include "engine/error.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/quant.h"

namespace eng {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Rng& rng, double init_std) {
  ENG_CHECK(num_embeddings > 0 && dim > 0, "Embedding: sizes must be positive, got ", num_embeddings, " x ", dim);
  NoGradGuard no_grad;
  weight = register_parameter("weight", mul_scalar(randn({num_embeddings, dim}, rng), init_std));
  set_quantizable("weight", true);
}

Tensor Embedding::forward(const Tensor& ids) const {
  if (weight.dtype() == DType::U8) return quant_embedding(weight, quant_format_of(weight, "Embedding"), ids);
  return embedding(weight, ids);
}

}  // namespace eng
