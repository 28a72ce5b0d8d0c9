// Reverse-mode autograd on a dynamic graph.
//
// Rules:
// - An op records a Node when grad mode is on and any input requires grad. The Node keeps its inputs
//   (the edges) and a closure that maps the output gradient to one gradient per input (undefined
//   for inputs that get none). Closures capture what they need; they must capture the op's output
//   only as `out.detach()`, never `out` itself (that would be a reference cycle).
// - backward(root, g) visits the nodes reachable from root in reverse topological order (an iterative
//   sort: no recursion limit), sums the gradients that reach a tensor from several uses, and adds
//   the result into each leaf's .grad (+=, so gradients accumulate across calls until zero_grad()).
// - The graph is freed by backward: each node drops its closure and inputs once it has run, so memory
//   held for the backward pass is released as the pass goes. Calling backward through the same nodes
//   again throws; pass retain_graph = true to keep them. A graph that is never backpropagated is
//   freed when its last output tensor goes away (also iteratively).
// - Backward closures run with grad mode off (no higher-order gradients); one may turn it on again
//   (EnableGradGuard) to build and backpropagate a local graph of its own (nested backward).
// - With anomaly detection on (engine/anomaly.h), the first op whose output or gradient turns non-finite
//   from finite inputs throws, naming the op.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace eng {

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct Node {
  const char* op = "";
  std::vector<Tensor> inputs;
  BackwardFn backward;
  bool released = false;
  ~Node();
};

bool grad_enabled();

// Called after every gradient backward() adds into a leaf's .grad, with the leaf: data-parallel training
// (tools/train/data_parallel.h) starts reducing a parameter's gradient once its last use has added to it, while
// backward goes on. One hook at a time (main thread); an empty function removes it.
void set_leaf_grad_hook(std::function<void(const TensorImpl*)> hook);

// Turns recording off for its lifetime (inference, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Turns recording on for its lifetime. For backward closures (which run with grad mode off) that recompute
// part of the forward and backpropagate through it: the reversible stack (models/reversible.h).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// True when grad mode is on and one of the inputs requires grad: whether an op must record.
bool needs_grad(const std::vector<Tensor>& inputs);

// Makes `out` the result of `op` applied to `inputs` with the given backward, when needs_grad(inputs).
// Returns `out`. `op` must be a name registered with register_op (checked when op checking is on).
Tensor record(Tensor out, const char* op, std::vector<Tensor> inputs, BackwardFn backward);

void run_backward(const Tensor& root, const Tensor& grad_output, bool retain_graph);

// The registry of differentiable op names: each ops/*.cpp registers the ops it defines, the tests
// prove every registered op has a gradient check and a line in docs/ops.md, and with checking on,
// record() refuses a name that was never registered.
bool register_op(const char* name, const char* file);
std::vector<std::pair<std::string, std::string>> registered_ops();  // (name, file), sorted by name
void set_op_checking(bool on);

}  // namespace eng

#define ENG_CONCAT_(a, b) a##b
#define ENG_CONCAT(a, b) ENG_CONCAT_(a, b)
#define ENG_REGISTER_OP(name) \
  static const bool ENG_CONCAT(eng_op_registered_, __LINE__) = ::eng::register_op(name, __FILE__)
