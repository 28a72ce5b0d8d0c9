// The one boundary between the ops and the CUDA backend: each op of ops/ that runs on CUDA tensors starts
// with `if (x.device() == Device::CUDA) return cuda_op::name(...);`, and the functions here do the rest:
// check the arguments, call the raw kernels of ops/cuda/kernels.h and record the autograd node, whose
// backward calls the kernels too (so a CUDA op's gradients are CUDA tensors). Same op names, same
// semantics as the CPU ops, f32 only; any other dtype, a CPU operand mixed in, or a case without a kernel
// yet (e.g. a broadcast other than a bias row) throws eng::Error naming the op and the shapes.
//
// A CUDA=1 build compiles ops/cuda/dispatch_*.cpp; any other build compiles ops/cuda/host.cpp, where every
// function throws "eng was built without CUDA" (no CUDA tensor can exist there, so none is ever reached).
// CPU kernels that have no CUDA twin call require_cpu() (ops/kernel_util.h) first, so they never read device
// memory.
#pragma once
#include "engine/rng.h"
#include "engine/tensor.h"
#include "ops/attention_mask.h"
#include "ops/bias_activation.h"
#include "ops/kernel_util.h"
#include "ops/linear_attention.h"
#include "ops/norm.h"

namespace eng::cuda_op {

// dispatch_elementwise.cpp: b of a's shape, or b's shape a suffix of a's (a bias row [n] or a table [L, n]
// broadcast over the leading dims); add and mul also take a as the suffix of b.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& a, double s);
Tensor mul_scalar(const Tensor& a, double s);
// The unary kernels: op is the CPU op's name ("exp", "log", "tanh", "sigmoid", "relu", "gelu_erf",
// "gelu_tanh", "silu", "elu").
Tensor unary(const Tensor& x, const char* op);
Tensor elu(const Tensor& x, double alpha);  // alpha = 1 only
Tensor bias_activation(const Tensor& x, const Tensor& bias, BiasActivation act);
// The mask from the CPU's generator (the same draws as on the CPU), applied on the device.
Tensor dropout(const Tensor& x, double p, Rng& rng);

// dispatch_nn.cpp
Tensor matmul(const Tensor& a, const Tensor& b);  // both at least 2-D
Tensor softmax(const Tensor& x, int64_t axis, bool log);  // the last axis only
Tensor norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool center, const char* op);
AddNormResult add_norm(const Tensor& x, const Tensor& h, const Tensor& weight, const Tensor& bias, double eps,
                       bool center, const char* op);
Tensor embedding(const Tensor& weight, const Tensor& ids);  // ids (i64) on either device
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double label_smoothing);
// Sums over leading axes (or all of them), and sum_to a trailing part of the shape: the bias gradients.
Tensor sum(const Tensor& a, const Shape& axes, bool keepdim);
Tensor sum_to(const Tensor& a, const Shape& shape);

// dispatch_attention.cpp. Softmax attention: the causal mask (with a query offset) only. Linear attention: causal,
// the elu + 1 or identity feature, no key padding.
Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale);
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionArgs& args,
                        bool causal);
// The recurrent step (generation): q [B, H, 1, M], k and v one position or undefined, the state s, z on the device
// (the caller has checked the shapes); no gradient.
Tensor linear_attention_step(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& s, Tensor& z,
                             const LinearAttentionArgs& args);

}  // namespace eng::cuda_op
