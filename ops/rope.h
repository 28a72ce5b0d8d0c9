// Rotary position embedding (RoPE, Su et al. 2021, Eq. 34), "rotate-half" pairing as in GPT-NeoX and
// LLaMA: dims i and i + D/2 form a pair rotated by angle p · base^(-2i/D), where p = offset + row index
// along axis -2. `offset` is the number of positions already cached, so a token generated at position
// p gets the same rotation as in the parallel forward. Backward is the inverse rotation.
#pragma once
#include "engine/tensor.h"

namespace eng {

Tensor rope(const Tensor& x, int64_t offset = 0, double base = 10000.0);  // x [..., L, D], D even

}  // namespace eng
