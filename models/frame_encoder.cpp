#include "models/frame_encoder.h"

#include "engine/error.h"
#include "models/reversible.h"
#include "ops/binary.h"
#include "ops/reduce.h"

namespace eng {

namespace {

const TransformerConfig& checked(const TransformerConfig& c) {
  c.validate();
  ENG_CHECK(c.encoder_layers >= 1 && c.decoder_layers == 0, "FrameEncoder: needs encoder_layers >= 1 and "
            "decoder_layers 0, got ", c.encoder_layers, " and ", c.decoder_layers);
  return c;
}

}  // namespace

FrameEncoder::FrameEncoder(const TransformerConfig& c, int64_t features)
    : cfg_(checked(c)),
      rng_(c.seed),
      input(features, c.d_model, rng_),
      head(c.d_model, c.vocab, rng_),
      drop_(c.dropout, rng_) {
  register_module("input", input);
  if (c.positional == PositionalKind::Learned) {
    positions = std::make_unique<LearnedPositional>(c.max_len, c.d_model, rng_);
    register_module("positions", *positions);
  }
  for (int64_t i = 0; i < c.encoder_layers; ++i) {
    layers.push_back(std::make_unique<EncoderLayer>(c, false, c.attention, rng_));
    register_module("layers" + std::to_string(i), *layers.back());
  }
  if (c.pre_norm) {
    final_norm = std::make_unique<Norm>(c.d_model, c.rms_norm);
    register_module("final_norm", *final_norm);
  }
  register_module("head", head);
  register_module("dropout", drop_);
}

Tensor FrameEncoder::features(const Tensor& frames, const std::vector<int64_t>& lengths) const {
  ENG_CHECK(frames.dim() == 3 && is_floating(frames.dtype()) && frames.size(2) == input.in_features(),
            "FrameEncoder: frames must be float [B, T, ", input.in_features(), "], got ", dtype_name(frames.dtype()),
            " ", frames.shape());
  const int64_t B = frames.size(0), T = frames.size(1);
  ENG_CHECK(T >= 1 && T <= cfg_.max_len, "FrameEncoder: ", T, " frames, the model takes 1 to max_len ", cfg_.max_len);
  ENG_CHECK(lengths.empty() || int64_t(lengths.size()) == B, "FrameEncoder: ", lengths.size(), " lengths for frames ",
            frames.shape());
  for (size_t b = 0; b < lengths.size(); ++b)
    ENG_CHECK(lengths[b] >= 1 && lengths[b] <= T, "FrameEncoder: lengths[", b, "] = ", lengths[b],
              " is outside [1, ", T, "]");
  AttentionMask mask;
  mask.key_lengths = lengths;
  Tensor x = input.forward(frames);
  if (cfg_.positional == PositionalKind::Sinusoidal)
    x = add(x, sinusoidal_table(T, cfg_.d_model, 0, x.dtype()));
  else if (positions)
    x = add(x, positions->forward(T));
  x = drop_.forward(x);
  if (cfg_.reversible) {
    x = reversible_stack(layers, x, mask, rng_);
  } else {
    for (const auto& layer : layers) x = layer->forward(x, mask);
  }
  return final_norm ? final_norm->forward(x) : x;
}

Tensor FrameEncoder::forward(const Tensor& frames, const std::vector<int64_t>& lengths) const {
  return head.forward(features(frames, lengths));
}

Tensor FrameEncoder::forward_pooled(const Tensor& frames, const std::vector<int64_t>& lengths) const {
  Tensor z = features(frames, lengths);
  const int64_t B = z.size(0), T = z.size(1);
  // The mean over valid positions as one weighted sum: weight 1/length on valid positions, 0 on padding.
  std::vector<double> w(size_t(B * T), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lengths.empty() ? T : lengths[size_t(b)];
    for (int64_t t = 0; t < n; ++t) w[size_t(b * T + t)] = 1.0 / double(n);
  }
  return head.forward(sum(mul(z, from_vector(w, {B, T, 1}, z.dtype())), {1}));
}

}  // namespace eng
