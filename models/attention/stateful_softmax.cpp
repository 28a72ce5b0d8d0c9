// `stateful-softmax`: softmax attention whose generation keeps the keys and values of past positions (a KV
// cache), the baseline of Katharopoulos et al. 2020, appendix C.1. It is the `softmax` class under the paper's
// name: the same forward (flash kernel) and the same step(), which costs O(t·D) at position t and memory O(t·D)
// per layer and head, against causal-linear's constant O(M·Dv). The slowest baseline, recomputing the whole
// prefix for every new token, is a generation mode of `bench generate`, not a variant.
#include "models/attention/softmax.h"

namespace eng {

namespace {

class StatefulSoftmaxAttention : public SoftmaxAttention {
 public:
  using SoftmaxAttention::SoftmaxAttention;
  std::string name() const override { return "stateful-softmax"; }
};

}  // namespace

ENG_REGISTER_ATTENTION(stateful_softmax, "stateful-softmax", "softmax attention generating with a key/value cache (paper appendix C.1)",
                       [](const AttentionConfig& c) { return std::make_unique<StatefulSoftmaxAttention>(c); });

}  // namespace eng
