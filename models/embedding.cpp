#include "models/embedding.h"

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/skip_init.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/quant.h"

namespace eng {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Rng& rng, double init_std) {
  ENG_CHECK(num_embeddings > 0 && dim > 0, "Embedding: sizes must be positive, got ", num_embeddings, " x ", dim);
  NoGradGuard no_grad;
  // Under SkipRandomInitGuard the draw is uninitialised and stays unscaled: scaling it would touch its pages.
  const Tensor drawn = randn({num_embeddings, dim}, rng);
  weight = register_parameter("weight", skipping_random_init() ? drawn : mul_scalar(drawn, init_std));
  set_quantizable("weight", true);
}

Tensor Embedding::forward(const Tensor& ids) const {
  if (weight.dtype() == DType::U8) return quant_embedding(weight, quant_format_of(weight, "Embedding"), ids);
  return embedding(weight, ids);
}

}  // namespace eng
