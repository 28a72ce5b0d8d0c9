#include "tools/train/memory_estimate.h"

#include <cstdio>

#include "engine/error.h"

namespace eng::jobs {

namespace {

// "56.7 GiB", "12.0 MiB", "3.1 KiB": three significant figures or so at any size.
std::string size_text(double bytes) {
  const char* unit = "GiB";
  double v = bytes / (1024.0 * 1024.0 * 1024.0);
  if (v < 1) v *= 1024, unit = "MiB";
  if (v < 1) v *= 1024, unit = "KiB";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, unit);
  return buf;
}

}  // namespace

std::string MemoryEstimate::describe() const {
  return "at least " + size_text(total()) + " (weights and optimizer state " + size_text(weights) + ", activations " +
         size_text(activations) + ", outputs " + size_text(outputs) + ", input data " + size_text(inputs) + ")";
}

MemoryEstimate estimate_training_memory(const TransformerConfig& c, int64_t batch, int64_t positions,
                                        int64_t input_features, int optimizer_states) {
  // Doubles throughout: the products of hostile flags overflow 64-bit integers.
  const double d = double(c.d_model), ff = double(c.d_ff), layers = double(c.encoder_layers + c.decoder_layers);
  const double out = double(c.outputs > 0 ? c.outputs : c.vocab), tokens = double(batch) * double(positions);
  // Each layer's Q, K, V and output projections (K and V may be shared by heads, so count Q and the output only)
  // and its two feed-forward matrices; the embedding, a positional table of max_len rows and the output layer.
  const double positional =
      c.positional == PositionalKind::Learned || c.positional == PositionalKind::Sinusoidal ? double(c.max_len) * d : 0;
  const double params = layers * (2 * d * d + 2 * d * ff) + double(c.vocab) * d + positional + d * out;
  MemoryEstimate e;
  e.weights = 4.0 * params * (2 + optimizer_states);  // f32 value and gradient, then the optimizer's tensors
  // Per position and layer the backward needs at least the normalised input, Q, K, V, the attention output and
  // the residual (6 d) and the feed-forward's hidden values before and after the activation (2 d_ff). Reversible
  // layers recompute them: one layer's worth at a time.
  const double kept_layers = c.reversible ? 1.0 : layers;
  e.activations = 4.0 * tokens * kept_layers * (6 * d + 2 * ff);
  e.outputs = 4.0 * tokens * out * 2;  // the outputs, then their gradient
  e.inputs = 4.0 * tokens * double(input_features);
  return e;
}

void check_memory(const MemoryEstimate& e, double limit_bytes, const std::string& limit_text) {
  ENG_CHECK(e.total() <= limit_bytes, "train: this run needs ", e.describe(), ", more than the ", size_text(limit_bytes),
            " ", limit_text, "; lower --batch, the sequence length or the model's size (--max-memory sets the "
            "limit)");
}

}  // namespace eng::jobs
