// Reading CTC outputs: greedy (best-path) decoding and the label error rate of Graves et al. 2006.
// Not differentiable; they sit beside ctc_loss because they share its conventions (blank index, the
// collapse rule, per-sequence lengths).
#pragma once
#include <vector>

#include "engine/tensor.h"

namespace eng {

using LabelSeqs = std::vector<std::vector<int64_t>>;

// Per sequence b, over its first input_lengths[b] frames: the most probable class of each frame (the
// lowest index on ties), repeats merged, blanks dropped. Scores [B, T, C] may be log-probabilities,
// probabilities or logits (the argmax is the same).
LabelSeqs ctc_greedy_decode(const Tensor& scores, const std::vector<int64_t>& input_lengths, int64_t blank = 0);

// The first lengths[b] entries of each row of a padded [B, S] i64 label tensor.
LabelSeqs unpad_labels(const Tensor& labels, const std::vector<int64_t>& lengths);

// Levenshtein distance: the fewest insertions, deletions and substitutions turning a into b.
int64_t edit_distance(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// Summed edit distance from each hypothesis to its reference over the summed reference length (a
// corpus-level rate, as Graves et al. report it; above 1 when hypotheses are long and wrong).
double label_error_rate(const LabelSeqs& hypotheses, const LabelSeqs& references);

}  // namespace eng
