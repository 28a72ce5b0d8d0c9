// Generation without a heap allocation per token: the recurrent form of a decoder-only LanguageModel for one
// sequence, on buffers sized once in the constructor (the activations of one position; each layer's KV cache of
// max_len positions, or its linear-attention state), with the kernels called on raw rows. No Tensor, autograd node
// or growing container is made in step(), where LanguageModel::step calls operator new ~3,100 times per token on a
// 6-layer model (Tensor handles, storages, shapes, op closures; docs/checkpoint.md). LanguageModel::step is the reference
// (tests/test_generator.cpp: the same logits at every position to f32 rounding, the same greedy tokens, and not one
// allocation from the engine's allocator or operator new in step(), the first one included).
//
// It covers the models embedded inference runs: decoder-only, not reversible, no Transformer-XL memory, positions
// none | sinusoidal | learned, every activation (gated ones too), tied or untied head, self-attention `softmax` (a
// KV cache per K/V group: grouped-query and multi-query too) or `causal-linear` / `linear` with a fused feature map
// (elu+1 or relu: the RNN form of Eq. 16–20 of Katharopoulos et al. 2020), f32 or quantized (q8_0 / q4_0,
// models/quantized.h) weights on the CPU, dropout off. unsupported() says why another model is not.
// The weights come as GeneratorWeights: from a LanguageModel (generator_weights(model)), or straight from a
// checkpoint without building one (models/generator_checkpoint.h), which is how the lean embed links no model code.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/feed_forward.h"
#include "models/positional.h"
#include "models/transformer.h"

namespace eng {

// What the Generator reads: a decoder-only model's weights as tensors (f32, or q8_0 / q4_0 blocks [N, K/32, B] for
// the products and the token table), with the numbers its step needs. The tensors share their storage with the
// model or the file they came from, which they keep alive.
struct GeneratorWeights {
  struct Product {  // y = W x + b, W [N, K]; b undefined without biases
    Tensor weight, bias;
  };
  struct NormWeights {  // LayerNorm (weight, bias; undefined when not affine) or RMSNorm (weight)
    bool rms = false;
    Tensor weight, bias;
    float eps = 0;
  };
  struct Layer {
    NormWeights norm1, norm2;
    Product q, k, v, out;  // k and v: kv_heads · head_dim rows
    Product fc1, fc2, fc3;  // fc3: the gate of a gated activation, else undefined
  };
  int64_t d_model = 0, heads = 0, kv_heads = 0, max_len = 0, vocab = 0;
  bool pre_norm = true;
  PositionalKind positional = PositionalKind::None;  // none, sinusoidal or learned
  Activation activation = Activation::Gelu;
  float embed_scale = 0;  // the token rows are multiplied by it (already resolved: never 0)
  bool linear = false;     // linear attention's RNN form; else softmax with a KV cache
  float softmax_scale = 0;  // softmax: the logits' scale
  bool relu_features = false;  // linear: φ = relu, else elu + 1
  float linear_eps = 0;        // linear: the denominator's eps
  Tensor tokens;     // [vocab, d_model], f32 or quantized
  Tensor positions;  // learned: [max_len, d_model]
  std::vector<Layer> layers;
  bool final_norm = false;  // pre-norm models end with one
  NormWeights final;
  Product head;  // undefined weight: tied to the token table (logits = x · tokensᵀ)
};

// "" when a Generator can run the model `c` describes, else why not (Generator::unsupported's words).
std::string generator_unsupported(const TransformerConfig& c);
// The numbers of GeneratorWeights that `c` gives, its tensors left undefined (the builders below fill them).
GeneratorWeights generator_shape(const TransformerConfig& c);
// The weights of a model Generator::unsupported accepts (throws otherwise).
GeneratorWeights generator_weights(const LanguageModel& model);

class Generator {
 public:
  explicit Generator(const LanguageModel& model);  // throws unsupported(model) when that is not ""
  explicit Generator(GeneratorWeights weights);
  // "" when a Generator can run `model`, else what stands in the way.
  static std::string unsupported(const LanguageModel& model);

  // Feeds token `id` at the next position and returns its logits [outputs()], valid until the next step.
  const float* step(int64_t id);
  int64_t length() const { return length_; }  // positions fed so far
  int64_t outputs() const { return int64_t(logits_.size()); }
  void reset() { length_ = 0; }  // a new sequence; the buffers stay

 private:
  // Left uninitialised (new float[]): a KV cache is read only where written, s and z are zeroed at position 0,
  // so no page is touched before generation reaches it.
  struct LayerState {
    std::unique_ptr<float[]> k, v;  // softmax: [G, max_len, Dh] each
    std::unique_ptr<float[]> s, z;  // linear: [H, Dh, Dh] and [H, Dh]
  };
  void attention(size_t layer, const float* x, float* out);
  void softmax_heads(LayerState& st, float scale);
  void linear_heads(LayerState& st, bool relu, float eps);
  void feed_forward(size_t layer, const float* x, float* out);

  GeneratorWeights w_;
  int64_t d_, heads_, groups_, head_dim_, max_len_;
  std::vector<LayerState> states_;
  std::vector<float> x_, n_, q_, k_, v_, o_, a_, hidden_, gate_, scores_, logits_;
  // The sinusoidal table [max_len, d_model], when the model adds one: left uninitialised, each row computed when
  // its position is first reached (rows 0..positions_ready_ - 1 are), so that starting costs no table's time or
  // pages. frequencies_ [d_model] holds the columns' f_i (models/positional.h).
  std::unique_ptr<float[]> positions_;
  std::vector<double> frequencies_;
  int64_t positions_ready_ = 0;
  int64_t length_ = 0;
};

}  // namespace eng
