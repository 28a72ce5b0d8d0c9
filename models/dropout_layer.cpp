#include "models/dropout_layer.h"

#include "engine/error.h"
#include "ops/dropout.h"

namespace eng {

Dropout::Dropout(double p, Rng& rng) : p_(p), rng_(&rng) {
  ENG_CHECK(p >= 0 && p < 1, "Dropout: p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) const { return dropout(x, p_, *rng_, training()); }

}  // namespace eng
