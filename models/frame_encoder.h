// An encoder over continuous inputs: frames of acoustic features (CTC), or image patches (classification).
// The transformer encoder of the seed paper's speech experiment (Katharopoulos et al. 2020 §4.3) and of a
// vision transformer (Dosovitskiy et al. 2021), with the inputs projected instead of embedded:
//
//   h_0 = dropout(x W_inᵀ + b_in + PE)          x [B, T, F] -> [B, T, d]; PE sinusoidal or learned, as the
//                                                config says (rotary and ALiBi act inside attention)
//   h_l = EncoderLayer_l(h_{l-1})                bidirectional; frames t >= lengths[b] are masked as keys
//   z   = final_norm(h_N)                         (pre-norm only, as LanguageModel)
//   forward:        logits[b, t] = head(z[b, t])                              [B, T, C]  (per frame: CTC)
//   forward_pooled: logits[b]    = head(mean over t < lengths[b] of z[b, t])  [B, C]     (classification)
//
// Padding frames never reach a valid position (they are masked keys, and the other sub-layers act per
// position), so the valid outputs do not depend on them. Any non-causal attention variant works. Config:
// vocab = the classes C, encoder_layers = the depth (decoder_layers must be 0), max_len = the longest T.
// Cost: the encoder stack's, plus O(B·T·F·d) for the input projection.
#pragma once
#include <memory>
#include <vector>

#include "models/transformer.h"

namespace eng {

class FrameEncoder : public Module {
  TransformerConfig cfg_;  // declared first: the layers below are built from them
  mutable Rng rng_;        // initial weights, then dropout masks (const forward passes draw from it)

 public:
  FrameEncoder(const TransformerConfig& c, int64_t features);

  // frames [B, T, F] (float), lengths: B valid-frame counts in [1, T], empty for all T -> z [B, T, d_model].
  Tensor features(const Tensor& frames, const std::vector<int64_t>& lengths = {}) const;
  Tensor forward(const Tensor& frames, const std::vector<int64_t>& lengths = {}) const;         // [B, T, C]
  Tensor forward_pooled(const Tensor& frames, const std::vector<int64_t>& lengths = {}) const;  // [B, C]

  const TransformerConfig& config() const { return cfg_; }
  int64_t input_features() const { return input.in_features(); }
  Rng& rng() { return rng_; }

  Linear input;
  std::unique_ptr<LearnedPositional> positions;
  std::vector<std::unique_ptr<EncoderLayer>> layers;
  std::unique_ptr<Norm> final_norm;
  Linear head;

 private:
  Dropout drop_;
};

}  // namespace eng
