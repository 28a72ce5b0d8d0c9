// Inverted dropout: in training each element is zeroed with probability p and the kept ones are
// scaled by 1 / (1 - p), so evaluation needs no rescaling.
#pragma once
#include "engine/rng.h"
#include "engine/tensor.h"

namespace eng {

// p in [0, 1). Returns x itself when !training or p == 0 (and then draws nothing from rng).
// Otherwise consumes one rng word per element, in row-major order, so a seed reproduces the mask.
Tensor dropout(const Tensor& x, double p, Rng& rng, bool training = true);

}  // namespace eng
