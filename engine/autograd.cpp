#include "engine/autograd.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "engine/anomaly.h"
#include "engine/cuda.h"
#include "engine/error.h"
#include "engine/strided.h"

namespace eng {
namespace {

thread_local bool g_grad_enabled = true;
bool g_check_ops = false;

struct OpRegistry {
  std::mutex mu;
  std::map<std::string, std::string> ops;
};
OpRegistry& op_registry() {
  static OpRegistry* r = new OpRegistry;
  return *r;
}

// dst += src, same shape, any strides (on CUDA: f32, dst contiguous).
void add_into(const Tensor& dst, const Tensor& src) {
  ENG_CHECK(dst.device() == src.device(), "autograd: a gradient on ", device_name(src.device()),
            " reached a tensor whose gradient is on ", device_name(dst.device()), " (shape ", dst.shape(), ")");
  if (dst.device() == Device::CUDA) {
    ENG_CHECK(dst.dtype() == DType::F32 && src.dtype() == DType::F32 && dst.is_contiguous(),
              "autograd: gradients on cuda are summed in f32 into a contiguous tensor, got ", dst.dtype(), " += ",
              src.dtype(), " of shape ", dst.shape());
    const Tensor s = src.is_contiguous() ? src : src.clone();
    return cuda::add_into(dst.device_data<float>(), s.device_data<float>(), dst.numel());
  }
  ENG_DISPATCH(dst.dtype(), D, ENG_DISPATCH(src.dtype(), S, {
    D* d = static_cast<D*>(dst.storage()->data);
    const S* s = static_cast<const S*>(src.storage()->data);
    for_each_offset<2>(dst.shape(), {dst.strides().data(), src.strides().data()}, {dst.offset(), src.offset()},
                       [&](auto o) { d[o[0]] += D(s[o[1]]); });
  }));
}

// A gradient being summed for a non-leaf tensor; `owned` says whether we may add into it in place.
struct PendingGrad {
  Tensor g;
  bool owned = false;
};

void accumulate(PendingGrad& acc, const Tensor& g) {
  if (!acc.g.defined()) {
    acc.g = g;
    return;
  }
  if (!acc.owned) {
    acc.g = acc.g.clone();
    acc.owned = true;
  }
  add_into(acc.g, g);
}

// Whether gradient g can be kept as `leaf`'s gradient as it is: a fresh contiguous tensor of the leaf's dtype and
// device that no other handle, view or user holds (the op that made it dropped its own handles).
bool owned_whole(const Tensor& g, const TensorImpl* leaf) {
  const auto& st = g.storage();
  return g.shared_impl().use_count() == 1 && st.use_count() == 1 && !st->keeper && !st->read_only && g.offset() == 0 &&
         g.dtype() == leaf->dtype && st->device == leaf->storage->device && g.is_contiguous() &&
         st->nbytes == size_t(g.numel()) * dtype_size(g.dtype()) && !g.requires_grad();
}

// Reverse topological order of the non-leaf tensors reachable from root, iteratively (post-order
// DFS). The handles keep each tensor alive until the pass has processed it.
std::vector<Tensor> topo_order(const Tensor& root) {
  std::vector<Tensor> order;
  std::unordered_set<TensorImpl*> seen;
  std::vector<std::pair<Tensor, size_t>> stack;
  stack.emplace_back(root, 0);
  seen.insert(root.impl());
  while (!stack.empty()) {
    auto& [t, next] = stack.back();
    Node* n = t.grad_fn().get();
    if (n && next < n->inputs.size()) {
      const Tensor& child = n->inputs[next++];
      if (child.defined() && child.grad_fn() && seen.insert(child.impl()).second) stack.emplace_back(child, 0);
    } else {
      order.push_back(std::move(t));
      stack.pop_back();
    }
  }
  std::reverse(order.begin(), order.end());
  return order;
}

}  // namespace

Node::~Node() {
  // Tear a long chain down with an explicit stack instead of recursive shared_ptr destructors.
  std::vector<std::shared_ptr<Node>> pending;
  auto take = [&](std::vector<Tensor>& inputs) {
    for (Tensor& in : inputs)
      // Only a tensor that dies with this node gives up its producer; live tensors keep theirs.
      if (in.shared_impl().use_count() == 1 && in.impl()->grad_fn && in.impl()->grad_fn.use_count() == 1)
        pending.push_back(std::move(in.impl()->grad_fn));
    inputs.clear();
  };
  take(inputs);
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    if (n.use_count() == 1) take(n->inputs);
  }
}

bool grad_enabled() { return g_grad_enabled; }

NoGradGuard::NoGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = prev_; }

EnableGradGuard::EnableGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { g_grad_enabled = prev_; }

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(Tensor out, const char* op, std::vector<Tensor> inputs, BackwardFn backward) {
  if (!needs_grad(inputs)) return out;
  ENG_CHECK(is_floating(out.dtype()), op, ": an i64 result cannot require grad");
  if (g_check_ops) {
    auto& R = op_registry();
    std::lock_guard<std::mutex> lock(R.mu);
    ENG_CHECK(R.ops.count(op), "autograd: op '", op, "' records a node but was never registered (ENG_REGISTER_OP)");
  }
  if (detect_anomaly()) check_op_output(op, out, inputs);
  auto node = std::make_shared<Node>();
  node->op = op;
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
  return out;
}

namespace {
std::function<void(const TensorImpl*)>& leaf_grad_hook() {
  static std::function<void(const TensorImpl*)> hook;
  return hook;
}
}  // namespace

void set_leaf_grad_hook(std::function<void(const TensorImpl*)> hook) { leaf_grad_hook() = std::move(hook); }

void run_backward(const Tensor& root, const Tensor& grad_output, bool retain_graph) {
  ENG_CHECK(root.requires_grad(), "backward: tensor of shape ", root.shape(),
            " does not require grad (no input of the computation had requires_grad set)");
  ENG_CHECK(grad_output.shape() == root.shape(), "backward: output gradient shape ", grad_output.shape(),
            " != tensor shape ", root.shape());
  ENG_CHECK(grad_output.device() == root.device(), "backward: output gradient on ", device_name(grad_output.device()),
            " for a tensor on ", device_name(root.device()));
  NoGradGuard no_grad;
  std::unordered_map<TensorImpl*, PendingGrad> grads;
  std::vector<Tensor> order = root.is_leaf() ? std::vector<Tensor>{root} : topo_order(root);
  grads[root.impl()].g = grad_output;

  auto add_to_leaf = [](TensorImpl* leaf, const Tensor& g) {
    if (!leaf->grad && owned_whole(g, leaf)) {
      leaf->grad = g.shared_impl();  // nothing else can see g: it becomes the gradient, no copy
    } else if (!leaf->grad) {
      Tensor fresh = empty_on(leaf->shape, leaf->dtype, leaf->storage->device);
      fresh.copy_from(g);
      leaf->grad = fresh.shared_impl();
    } else {
      add_into(Tensor(leaf->grad), g);
    }
    if (leaf_grad_hook()) leaf_grad_hook()(leaf);
  };

  for (Tensor& handle : order) {
    Tensor keep = std::move(handle);  // released at the end of this iteration: nothing later needs it
    TensorImpl* t = keep.impl();
    auto it = grads.find(t);
    if (it == grads.end()) continue;  // no gradient flowed here
    Tensor g = it->second.g;
    grads.erase(it);
    Node* node = t->grad_fn.get();
    if (!node) {
      add_to_leaf(t, g);
      continue;
    }
    ENG_CHECK(!node->released, "backward: the graph through op '", node->op,
              "' was already freed by an earlier backward; pass retain_graph = true to backward twice");
    std::vector<Tensor> gin = node->backward(g);
    ENG_CHECK(gin.size() == node->inputs.size(), "autograd: op '", node->op, "' returned ", gin.size(),
              " gradients for ", node->inputs.size(), " inputs");
    for (size_t i = 0; i < gin.size(); ++i) {
      const Tensor& in = node->inputs[i];
      if (!in.defined() || !in.requires_grad() || !gin[i].defined()) continue;
      ENG_CHECK(gin[i].shape() == in.shape(), "autograd: op '", node->op, "' returned a gradient of shape ",
                gin[i].shape(), " for input ", i, " of shape ", in.shape());
      ENG_CHECK(gin[i].device() == in.device(), "autograd: op '", node->op, "' returned a gradient on ",
                device_name(gin[i].device()), " for input ", i, " on ", device_name(in.device()));
      if (detect_anomaly()) check_op_gradient(node->op, i, gin[i], g);
      if (in.is_leaf())
        add_to_leaf(in.impl(), gin[i]);
      else
        accumulate(grads[in.impl()], gin[i]);
    }
    if (!retain_graph) {
      node->backward = nullptr;
      node->inputs.clear();
      node->released = true;
    }
  }
}

bool register_op(const char* name, const char* file) {
  auto& R = op_registry();
  std::lock_guard<std::mutex> lock(R.mu);
  R.ops[name] = file;
  return true;
}

std::vector<std::pair<std::string, std::string>> registered_ops() {
  auto& R = op_registry();
  std::lock_guard<std::mutex> lock(R.mu);
  return {R.ops.begin(), R.ops.end()};
}

void set_op_checking(bool on) { g_check_ops = on; }

}  // namespace eng
