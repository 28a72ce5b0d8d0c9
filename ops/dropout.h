// Inverted dropout: in training each element is zeroed with probability p and the kept ones are
// scaled by 1 / (1 - p), so evaluation needs no rescaling.
#pragma once
#include "engine/rng.h"
#include "engine/tensor.h"

namespace eng {

// p in [0, 1). Returns x itself when !training or p == 0 (and then draws nothing from rng).
// Otherwise row i of x (its leading dimension; a scalar is one row) is row g = batch_first_row() + i of the batch
// (engine/batch_row.h): its mask is drawn from rng.fork(g), element j of the row (row-major) from word j, and the
// call advances rng by one word. A row's mask depends on (rng's state, g) alone, not on the rows drawn with it,
// nor on the row's length (a longer padded row draws the same mask on its first elements).
Tensor dropout(const Tensor& x, double p, Rng& rng, bool training = true);

}  // namespace eng
