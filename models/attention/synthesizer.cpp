#include "models/attention/synthesizer.h"

#include <cmath>

#include "engine/error.h"
#include "engine/rng.h"
#include "models/attention/softmax.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/softmax.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(synthesizer, "synthesizer",
                       "synthesizer (Tay et al. 2020): weights synthesised from each query (kind=dense) or learned "
                       "per position pair (kind=random), keys unused, O(N^2), needs max_len",
                       [](const AttentionConfig& c) { return std::make_unique<SynthesizerAttention>(c); });

namespace {

constexpr uint64_t kStream = 0x73796e74'68657a72ull;  // "synthezr": not the words of the model's generator

}  // namespace

SynthesizerAttention::SynthesizerAttention(const AttentionConfig& config)
    : heads_(config.heads), head_dim_(config.head_dim), max_len_(config.max_len) {
  const std::string kind = config.options.get_string("kind", "dense");
  ENG_CHECK(kind == "dense" || kind == "random", "attention 'synthesizer': option kind must be dense or random, got '",
            kind, "'");
  kind_ = kind == "dense" ? Kind::Dense : Kind::Random;
  const bool fixed = config.options.get_bool("fixed", false);
  ENG_CHECK(!fixed || kind_ == Kind::Random, "attention 'synthesizer': option fixed applies to kind=random only");
  ENG_CHECK(max_len_ >= 1, "attention 'synthesizer': needs max_len (the longest sequence: B and R have one column per "
            "key position), got ", max_len_);
  ENG_CHECK(heads_ >= 1 && head_dim_ >= 1, "attention 'synthesizer': needs heads and head_dim >= 1, got ", heads_,
            " and ", head_dim_);
  // Every mask acts through the dense additive term on the synthesised logits.
  accepts_.keep = accepts_.bias = accepts_.alibi = accepts_.query_offset = accepts_.cross = true;
  accepts_.grouped_step = true;
  Rng rng(config.seed ^ kStream);
  if (kind_ == Kind::Random) {
    const Tensor r = randn({heads_, max_len_, max_len_}, rng);
    r_ = fixed ? register_buffer("R", r) : register_parameter("R", r);
    return;
  }
  const double bound = 1.0 / std::sqrt(double(head_dim_));  // nn.Linear's init, fan_in = D for both layers
  w1_ = register_parameter("W1", rand({heads_, head_dim_, head_dim_}, rng, DType::F32, -bound, bound));
  b1_ = register_parameter("b1", rand({heads_, 1, head_dim_}, rng, DType::F32, -bound, bound));
  w2_ = register_parameter("W2", rand({heads_, head_dim_, max_len_}, rng, DType::F32, -bound, bound));
  b2_ = register_parameter("b2", rand({heads_, 1, max_len_}, rng, DType::F32, -bound, bound));
}

Tensor SynthesizerAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2);
  ENG_CHECK(H == heads_ && q.size(3) == head_dim_, "attention 'synthesizer': built for ", heads_, " heads of dim ",
            head_dim_, ", got q ", q.shape());
  const int64_t first = mask.query_offset;  // absolute position of query 0: its row of R
  ENG_CHECK(Lk <= max_len_ && (kind_ == Kind::Dense || (first >= 0 && first + Lq <= max_len_)),
            "attention 'synthesizer': q ", q.shape(), " (from position ", first, ") and k ", k.shape(),
            " exceed max_len ", max_len_, " (one synthesised logit per position up to max_len)");
  check_attention_mask(mask, B, H, Lq, Lk, q.dtype(), "attention 'synthesizer'");
  Tensor logits;
  if (kind_ == Kind::Dense) {
    const DType t = q.dtype();
    const Tensor hidden = relu(add(matmul(q, w1_.to(t)), b1_.to(t)));  // [B, H, Lq, D]
    logits = narrow(add(matmul(hidden, w2_.to(t)), b2_.to(t)), -1, 0, Lk);  // B_i, its first Lk entries
  } else {
    // [1, H, Lq, Lk]: the same synthesised weights for every batch element
    logits = unsqueeze(narrow(narrow(r_.to(q.dtype()), 1, first, Lq), 2, 0, Lk), 0);
  }
  if (mask.any()) logits = add(logits, dense_attention_mask(mask, B, H, Lq, Lk, q.dtype(), "attention 'synthesizer'"));
  return matmul(softmax(logits, -1), v);
}

std::unique_ptr<AttentionState> SynthesizerAttention::new_state() const { return std::make_unique<KVCacheState>(); }

Tensor SynthesizerAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                        const AttentionMask& mask) {
  return kv_cache_step(*this, q, k, v, state, mask, false);
}

}  // namespace eng
