// Connectionist temporal classification loss (Graves, Fernandez, Gomez, Schmidhuber 2006): the negative
// log-probability of a label sequence summed over every frame-level alignment that collapses to it
// (merge repeats, then drop blanks), by the forward-backward recursions in log space.
//
// Input: log-probabilities [B, T, C], e.g. log_softmax(logits) (as in PyTorch; the op does not normalise,
// so any real scores are accepted and the gradient holds for them too). Keeping log_softmax a separate op
// leaves this one a single concept; with it the chain gives Graves' softmax - occupancy gradient.
// Targets [B, S] i64, row b's first target_lengths[b] entries are its labels (in [0, C), never blank);
// the rest is padding. Row b reads only its first input_lengths[b] frames.
//
// Reduction: Mean = the sum of the per-sequence losses / B (unlike PyTorch's 'mean', not divided by the
// target lengths), Sum, or None (a [B] tensor). An impossible alignment (too few frames for the labels
// and the blanks their repeats need) has loss +inf and gradient 0; zero_infinity makes its loss 0 too.
// The gradient -gamma_t(k) / p, gamma the alpha * beta occupancy of class k at frame t, is computed in
// the forward pass when a gradient is wanted, and scaled by the output gradient in the backward.
#pragma once
#include <vector>

#include "engine/tensor.h"

namespace eng {

enum class CTCReduction { None, Sum, Mean };

struct CTCLossOptions {
  int64_t blank = 0;
  CTCReduction reduction = CTCReduction::Mean;
  bool zero_infinity = false;
};

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, const CTCLossOptions& opt = {});

}  // namespace eng
