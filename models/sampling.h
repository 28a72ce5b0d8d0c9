// Choosing the next token from a row of logits, as build/generate does:
//   temperature 0: the argmax (greedy; the lowest id among equal maxima);
//   otherwise p_i ∝ exp(logit_i / temperature), restricted to the top_k most likely tokens (top_k 0: all) and then
//   to the smallest set of most likely tokens whose mass reaches top_p (nucleus sampling, Holtzman et al. 2020;
//   top_p 1: all), renormalised, and one token drawn with one uniform number of `rng`.
// Ties in probability are ordered by id, so a seed reproduces the same tokens.
#pragma once
#include <cstdint>

#include "engine/rng.h"

namespace eng {

struct SamplingOptions {
  double temperature = 1.0;  // >= 0
  int64_t top_k = 0;         // >= 0
  double top_p = 1.0;        // (0, 1]
};

int64_t sample_token(const float* logits, int64_t n, const SamplingOptions& o, Rng& rng);

}  // namespace eng
