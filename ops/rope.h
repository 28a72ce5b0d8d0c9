// Rotary position embedding (RoPE, Su et al. 2021, Eq. 34): each pair of dims (a, b) of a row at position
// p = offset + row index along axis -2 is rotated by the angle p · base^(-2i/D), i = 0 .. D/2 - 1 the pair's index:
//   a' = a cos - b sin,  b' = b cos + a sin
// Two layouts of the pairs, both in use by published checkpoints:
//   rotate-half  pair i = dims (i, i + D/2): GPT-NeoX, Hugging Face's LLaMA
//   interleaved  pair i = dims (2i, 2i + 1): the RoFormer paper, Meta's LLaMA release, llama2.c
// `offset` is the number of positions already cached, so a token generated at position p gets the same rotation
// as in the parallel forward. Backward is the inverse rotation.
#pragma once
#include <string>

#include "engine/tensor.h"

namespace eng {

enum class RopePairing { RotateHalf, Interleaved };
RopePairing parse_rope_pairing(const std::string& name);  // "rotate-half" or "interleaved"
const char* rope_pairing_name(RopePairing p);

// x [..., L, D], D even
Tensor rope(const Tensor& x, int64_t offset = 0, double base = 10000.0,
            RopePairing pairing = RopePairing::RotateHalf);

}  // namespace eng
