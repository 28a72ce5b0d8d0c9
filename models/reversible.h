// Reversible residual layers (RevNet, Gomez et al. 2017; Reformer, Kitaev et al. 2020, §3 "Reversible
// Transformer") for the pre-norm decoder-only / encoder-only LanguageModel (TransformerConfig::reversible).
//
//   X1 = X2 = embedding output                          (two streams, both start from the input)
//   Y1 = X1 + F(X2),  F(x) = dropout(attention(norm1(x)))       (Reformer §3, "Reversible Transformer")
//   Y2 = X2 + G(Y1),  G(x) = dropout(ffn(norm2(x)))
//   out = (Y1 + Y2) / 2                                  (then the final norm and the head)
//
// The inverse, X2 = Y2 − G(Y1) and X1 = Y1 − F(X2), lets the backward rebuild every layer's input from its
// output: one autograd node ("reversible_stack") covers the whole stack, runs its forward under no-grad and keeps
// only the final (Y1, Y2). Its backward walks the layers in reverse, recomputes G and F on the rebuilt inputs with
// grad mode on, backpropagates through each small local graph (which adds into the parameters' gradients) and
// passes dX1 + dX2 to the embedding. Exact replay: before each F and G call the forward records the model
// generator's position (dropout masks) and a copy of the layer's buffers (the call counters that decide
// performer's and reformer's random draws); the recomputation restores them, and the backward puts back the
// post-forward values when it is done, so the run continues as if nothing had been recomputed.
//
// Output: Reformer's code concatenates [Y1; Y2] and projects; the average keeps the head's input width and
// parameter names unchanged, so a reversible model's checkpoint has the same keys as a plain one.
//
// Cost: time = the plain stack's forward + about two forwards and one backward (F and G are recomputed once,
// plus the subtractions); activation memory = 2 × [B, L, d_model] for (Y1, Y2) plus ONE layer's activations,
// independent of depth (the plain stack keeps every layer's). Inputs are rebuilt by subtraction, so in f32 they
// carry rounding of order eps × |activations| per layer (negligible in f64; the tests compare in f64).
#pragma once
#include <memory>
#include <vector>

#include "models/transformer.h"

namespace eng {

// x [B, L, d_model] through `layers` as above. memory_saving = false evaluates the same function with
// ordinary autograd (every activation kept): the reference the tests compare the custom node with. `rng` is
// the generator the layers' dropout draws from (LanguageModel::rng()).
Tensor reversible_stack(const std::vector<std::unique_ptr<EncoderLayer>>& layers, const Tensor& x,
                        const AttentionMask& mask, Rng& rng, bool memory_saving = true);

// One generation step of the same two-stream function, with each layer's recurrent attention (step()).
Tensor reversible_step(const std::vector<std::unique_ptr<EncoderLayer>>& layers, const Tensor& x_t,
                       std::vector<std::unique_ptr<AttentionState>>& states);

}  // namespace eng
