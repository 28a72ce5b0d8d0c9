#include "models/attention/efficient.h"

#include <limits>
#include <vector>

#include "engine/error.h"
#include "ops/matmul.h"
#include "ops/select.h"
#include "ops/softmax.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(efficient, "efficient",
                       "efficient attention (Shen et al. 2018): softmax(Q over features) (softmax(K over "
                       "positions)^T V), O(N), non-causal",
                       [](const AttentionConfig& c) { return std::make_unique<EfficientAttention>(c); });

EfficientAttention::EfficientAttention(const AttentionConfig&) {
  accepts_.causal = false;
  accepts_.cross = true;
  accepts_.why_not = "every key enters the shared context, and no (query, key) logit is ever formed";
}

Tensor EfficientAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const int64_t Lk = k.size(2);
  Tensor keys = k;
  if (!mask.key_lengths.empty()) {
    // -inf before the position softmax: padded keys get weight exactly 0, whatever they hold.
    keys = masked_fill(k, padded_keys(mask.key_lengths, Lk, true), -std::numeric_limits<double>::infinity());
  }
  const Tensor rho_q = softmax(q, -1);                          // [B, H, Lq, D], Eq. 6
  const Tensor rho_k = softmax(keys, 2);                        // [B, H, Lk, D]; all padded: zeros, no NaN
  const Tensor context = matmul(transpose(rho_k, 2, 3), v);     // [B, H, D, Dv]
  return matmul(rho_q, context);                                // [B, H, Lq, Dv], Eq. 4
}

}  // namespace eng
