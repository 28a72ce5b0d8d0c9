#include "models/attention/linformer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "engine/rng.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/select.h"
#include "ops/softmax.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(linformer, "linformer",
                       "Linformer (Wang et al. 2020): keys and values projected along the sequence to k rows by "
                       "learned E, F; O(n k), non-causal, needs max_len",
                       [](const AttentionConfig& c) { return std::make_unique<LinformerAttention>(c); });

namespace {

// The Linformer's own Philox key, so that E and F never reuse the words of the model's generator Rng(seed).
constexpr uint64_t kStream = 0x6c696e66'6f726d72ull;  // "linformr"
constexpr int64_t kDefaultK = 256;

LinformerAttention::Share parse_share(const std::string& s) {
  if (s == "none") return LinformerAttention::Share::None;
  if (s == "headwise") return LinformerAttention::Share::Headwise;
  ENG_CHECK(s == "kv", "attention 'linformer': option share must be none, headwise or kv, got '", s, "'");
  return LinformerAttention::Share::KV;
}

}  // namespace

LinformerAttention::LinformerAttention(const AttentionConfig& config)
    : heads_(config.heads),
      max_len_(config.max_len),
      k_(config.options.get_int("k", std::min(kDefaultK, std::max<int64_t>(config.max_len, 1)),
                                IntRange{1, std::max<int64_t>(config.max_len, 1)})),
      share_(parse_share(config.options.get_string("share", "none"))) {
  ENG_CHECK(max_len_ >= 1, "attention 'linformer': needs max_len >= 1 (E and F have one column per position), got ",
            max_len_);
  accepts_.causal = false;
  accepts_.cross = true;  // Lq queries against the k projected keys, for any n <= max_len
  accepts_.why_not = "its projected keys mix every position, future ones included, and it forms no (query, key) logits";
  Rng rng(config.seed ^ kStream);
  const Shape shape = share_ == Share::None ? Shape{heads_, k_, max_len_} : Shape{k_, max_len_};
  const double stddev = 1.0 / std::sqrt(double(k_));  // N(0, 1/k), Theorem 2's R
  e_ = register_parameter("E", mul_scalar(randn(shape, rng), stddev));
  f_ = share_ == Share::KV ? e_ : register_parameter("F", mul_scalar(randn(shape, rng), stddev));
}

Tensor LinformerAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const int64_t B = q.size(0), H = q.size(1), n = k.size(2);
  check_attention_mask(mask, B, H, q.size(2), n, q.dtype(), "attention 'linformer'");
  ENG_CHECK(share_ != Share::None || H == heads_, "attention 'linformer': q ", q.shape(), " has ", H,
            " heads, the variant was built with one E and F per head for ", heads_);
  ENG_CHECK(n <= max_len_, "attention 'linformer': k ", k.shape(), " has ", n, " positions, more than max_len ",
            max_len_, " that E and F were built for");
  Tensor keys = k, values = v;
  if (!mask.key_lengths.empty()) {
    // Zero rows contribute nothing to E K and F V, whatever the padded positions held (masked_fill writes the
    // zeros without reading them, so even inf cannot leak in, and no gradient flows to them).
    std::vector<double> padded(size_t(B * n), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = mask.key_lengths[size_t(b)]; j < n; ++j) padded[size_t(b * n + j)] = 1;
    const Tensor pad = from_vector(padded, {B, 1, n, 1}, DType::I64);
    keys = masked_fill(k, pad, 0.0);
    values = masked_fill(v, pad, 0.0);
  }
  // The first n columns: a shorter input is projected as if the positions after it held zeros.
  const Tensor e = narrow(e_, -1, 0, n).to(q.dtype()), f = narrow(f_, -1, 0, n).to(q.dtype());
  const Tensor kp = matmul(e, keys);     // [B, H, k, D]; [k, n] or [H, k, n] broadcasts over the batch
  const Tensor vp = matmul(f, values);   // [B, H, k, Dv]
  const Tensor p = softmax(mul_scalar(matmul(q, transpose(kp, 2, 3)), 1.0 / std::sqrt(double(q.size(3)))), -1);
  return matmul(p, vp);                  // [B, H, Lq, Dv], Eq. 7
}

}  // namespace eng
