#include "models/reversible.h"

#include "engine/autograd.h"
#include "engine/batch_row.h"
#include "engine/error.h"
#include "ops/binary.h"

ENG_REGISTER_OP("reversible_stack");

namespace eng {
namespace {

// Copies of a layer's buffers (attention call counters and the like), in named_buffers() order.
std::vector<Tensor> snapshot_buffers(const Module& m) {
  std::vector<Tensor> out;
  for (const auto& nb : m.named_buffers()) out.push_back(nb.second.clone());
  return out;
}

void restore_buffers(const Module& m, const std::vector<Tensor>& saved) {
  auto buffers = m.named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].second.copy_from(saved[i]);
}

// What a branch call saw in the forward: replaying it makes the recomputation draw the same dropout masks
// and the same attention randomness.
struct Replay {
  uint64_t rng_position = 0;
  std::vector<Tensor> buffers;
};

Replay record_replay(const Module& m, const Rng& rng) { return {rng.position(), snapshot_buffers(m)}; }

void replay(const Module& m, Rng& rng, const Replay& r) {
  rng.set_position(r.rng_position);
  restore_buffers(m, r.buffers);
}

// Backpropagates `grad` through branch(input) recomputed on a fresh leaf; returns (branch output, d input).
// The local graph's parameters receive their gradients directly (added into .grad).
template <class Branch>
std::pair<Tensor, Tensor> recompute(const Tensor& input, const Tensor& grad, Branch branch) {
  Tensor leaf = input.detach();
  leaf.set_requires_grad();
  Tensor y;
  {
    EnableGradGuard grad_on;
    y = branch(leaf);
  }
  y.backward(grad);
  return {y.detach(), leaf.grad()};
}

}  // namespace

Tensor reversible_stack(const std::vector<std::unique_ptr<EncoderLayer>>& layers, const Tensor& x,
                        const AttentionMask& mask, Rng& rng, bool memory_saving) {
  ENG_CHECK(!layers.empty(), "reversible_stack: needs at least one layer");
  ENG_CHECK(x.dim() == 3, "reversible_stack: x must be [B, L, d_model], got ", x.shape());
  std::vector<Tensor> inputs{x};
  for (const auto& layer : layers)
    for (const Tensor& p : layer->parameters()) inputs.push_back(p);
  if (!memory_saving || !needs_grad(inputs)) {
    Tensor x1 = x, x2 = x;
    for (const auto& layer : layers) {
      x1 = add(x1, layer->attention_branch(x2, mask));
      x2 = add(x2, layer->ffn_branch(x1));
    }
    return mul_scalar(add(x1, x2), 0.5);
  }

  std::vector<const EncoderLayer*> stack;
  std::vector<Replay> f_replay, g_replay;
  Tensor y1 = x.detach(), y2 = x.detach();
  Tensor out;
  {
    NoGradGuard no_grad;  // nothing inside the stack is kept for the backward
    for (const auto& layer : layers) {
      stack.push_back(layer.get());
      f_replay.push_back(record_replay(*layer, rng));
      y1 = add(y1, layer->attention_branch(y2, mask));
      g_replay.push_back(record_replay(*layer, rng));
      y2 = add(y2, layer->ffn_branch(y1));
    }
    out = mul_scalar(add(y1, y2), 0.5);
  }
  const size_t n_inputs = inputs.size();
  return record(out, "reversible_stack", std::move(inputs),
                [stack, mask, &rng, y1, y2, f_replay, g_replay, n_inputs,
                 first = batch_first_row()](const Tensor& grad) {
                  // The rows the forward computed (dropout keys its masks by them; the backward may run outside the
                  // forward's scope), and the state the run is in now, given back at the end: the recomputation
                  // leaves no trace.
                  const BatchRowScope rows(first);
                  const uint64_t resume_position = rng.position();
                  std::vector<std::vector<Tensor>> resume_buffers;
                  for (const EncoderLayer* layer : stack) resume_buffers.push_back(snapshot_buffers(*layer));

                  Tensor Y1 = y1, Y2 = y2;
                  Tensor dY1 = mul_scalar(grad, 0.5), dY2 = dY1;
                  for (size_t i = stack.size(); i-- > 0;) {
                    const EncoderLayer& layer = *stack[i];
                    // Y2 = X2 + G(Y1): dY1 gains G's input gradient, X2 = Y2 - G(Y1).
                    replay(layer, rng, g_replay[i]);
                    auto [g_out, g_in] = recompute(Y1, dY2, [&](const Tensor& t) { return layer.ffn_branch(t); });
                    Tensor X2 = sub(Y2, g_out);
                    dY1 = add(dY1, g_in);
                    // Y1 = X1 + F(X2): dX2 = dY2 + F's input gradient, X1 = Y1 - F(X2), dX1 = dY1.
                    replay(layer, rng, f_replay[i]);
                    auto [f_out, f_in] =
                        recompute(X2, dY1, [&](const Tensor& t) { return layer.attention_branch(t, mask); });
                    Y1 = sub(Y1, f_out);
                    Y2 = X2;
                    dY2 = add(dY2, f_in);
                  }

                  rng.set_position(resume_position);
                  for (size_t i = 0; i < stack.size(); ++i) restore_buffers(*stack[i], resume_buffers[i]);
                  std::vector<Tensor> grads(n_inputs);  // parameters: already added into .grad above
                  grads[0] = add(dY1, dY2);
                  return grads;
                });
}

Tensor reversible_step(const std::vector<std::unique_ptr<EncoderLayer>>& layers, const Tensor& x_t,
                       std::vector<std::unique_ptr<AttentionState>>& states) {
  ENG_CHECK(states.size() == layers.size(), "reversible_step: ", states.size(), " states for ", layers.size(),
            " layers");
  Tensor x1 = x_t, x2 = x_t;
  for (size_t i = 0; i < layers.size(); ++i) {
    x1 = add(x1, layers[i]->attention_step_branch(x2, *states[i]));
    x2 = add(x2, layers[i]->ffn_branch(x1));
  }
  return mul_scalar(add(x1, x2), 0.5);
}

}  // namespace eng
