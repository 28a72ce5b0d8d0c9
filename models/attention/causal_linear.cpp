// `causal-linear`: linear attention that is always causal (Katharopoulos et al. 2020, Eq. 9–12), with the
// recurrent form for generation (Eq. 16–20). The class is models/attention/linear.h's; this variant only fixes
// causality, so a model built with it is autoregressive whatever mask it is given.
#include "models/attention/linear.h"

namespace eng {

ENG_REGISTER_ATTENTION(causal_linear, "causal-linear", "causal linear attention (Katharopoulos et al. 2020), Algorithm 1 backward, RNN form",
                       [](const AttentionConfig& c) { return std::make_unique<LinearAttention>(c, true); });

}  // namespace eng
