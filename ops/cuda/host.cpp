// ops/cuda/dispatch.h in a build without CUDA (the default `make`): no CUDA tensor can be made there, so no op
// ever reaches these; they exist so that the ops link, and say how to get the real ones.
#include "engine/error.h"
#include "ops/cuda/dispatch.h"

namespace eng::cuda_op {
namespace {

[[noreturn]] void not_built(const char* op) {
  fail(op, ": a cuda tensor, but eng was built without CUDA; rebuild with make CUDA=1");
}

}  // namespace

Tensor add(const Tensor&, const Tensor&) { not_built("add"); }
Tensor sub(const Tensor&, const Tensor&) { not_built("sub"); }
Tensor mul(const Tensor&, const Tensor&) { not_built("mul"); }
Tensor div(const Tensor&, const Tensor&) { not_built("div"); }
Tensor add_scalar(const Tensor&, double) { not_built("add_scalar"); }
Tensor mul_scalar(const Tensor&, double) { not_built("mul_scalar"); }
Tensor unary(const Tensor&, const char* op) { not_built(op); }
Tensor elu(const Tensor&, double) { not_built("elu"); }
Tensor bias_activation(const Tensor&, const Tensor&, BiasActivation) { not_built("bias_activation"); }
Tensor dropout(const Tensor&, double, Rng&) { not_built("dropout"); }
Tensor matmul(const Tensor&, const Tensor&) { not_built("matmul"); }
Tensor softmax(const Tensor&, int64_t, bool log) { not_built(log ? "log_softmax" : "softmax"); }
Tensor norm(const Tensor&, const Tensor&, const Tensor&, double, bool, const char* op) { not_built(op); }
AddNormResult add_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, bool, const char* op) {
  not_built(op);
}
Tensor embedding(const Tensor&, const Tensor&) { not_built("embedding"); }
Tensor cross_entropy(const Tensor&, const Tensor&, int64_t, double) { not_built("cross_entropy"); }
Tensor sum(const Tensor&, const Shape&, bool) { not_built("sum"); }
Tensor sum_to(const Tensor&, const Shape&) { not_built("sum_to"); }
Tensor flash_attention(const Tensor&, const Tensor&, const Tensor&, const AttentionMask&, double) {
  not_built("flash_attention");
}
Tensor linear_attention(const Tensor&, const Tensor&, const Tensor&, const LinearAttentionArgs&, bool causal) {
  not_built(causal ? "causal_linear_attention" : "linear_attention");
}
Tensor linear_attention_step(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                             const LinearAttentionArgs&) {
  not_built("linear_attention_step");
}

}  // namespace eng::cuda_op
