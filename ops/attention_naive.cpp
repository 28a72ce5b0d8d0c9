#include "ops/attention_naive.h"

#include "ops/attention_mask.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/softmax.h"
#include "ops/view.h"

namespace eng {

Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale) {
  check_qkv(q, k, v, "naive_attention");
  Tensor logits = mul_scalar(matmul(q, transpose(k, -2, -1)), scale);
  if (mask.any())
    logits = add(logits, dense_attention_mask(mask, q.size(0), q.size(1), q.size(2), k.size(2), q.dtype(),
                                              "naive_attention"));
  return matmul(softmax(logits, -1), v);
}

}  // namespace eng
