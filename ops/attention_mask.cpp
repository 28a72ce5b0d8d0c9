#include "ops/attention_mask.h"

#include <cmath>
#include <limits>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "ops/binary.h"
#include "ops/kernel_util.h"

namespace eng {
namespace {

// Whether `t` broadcasts to `to` without growing it (NumPy rules, trailing dims aligned).
bool broadcasts_to(const Shape& t, const Shape& to) {
  if (t.size() > to.size()) return false;
  const size_t lead = to.size() - t.size();
  for (size_t d = 0; d < t.size(); ++d)
    if (t[d] != 1 && t[d] != to[lead + d]) return false;
  return true;
}

}  // namespace

void check_attention_mask(const AttentionMask& mask, int64_t B, int64_t H, int64_t Lq, int64_t Lk, DType dtype,
                          const char* op) {
  const Shape logits{B, H, Lq, Lk};
  if (!mask.key_lengths.empty()) {
    ENG_CHECK(int64_t(mask.key_lengths.size()) == B, op, ": key_lengths has ", mask.key_lengths.size(),
              " entries for a batch of ", B);
    for (size_t b = 0; b < mask.key_lengths.size(); ++b)
      ENG_CHECK(mask.key_lengths[b] >= 0 && mask.key_lengths[b] <= Lk, op, ": key_lengths[", b, "] = ",
                mask.key_lengths[b], " is outside [0, ", Lk, "]");
  }
  if (mask.keep.defined())
    ENG_CHECK(broadcasts_to(mask.keep.shape(), logits), op, ": keep of shape ", mask.keep.shape(),
              " cannot be broadcast to the logits ", logits);
  if (mask.bias.defined()) {
    ENG_CHECK(broadcasts_to(mask.bias.shape(), logits), op, ": bias of shape ", mask.bias.shape(),
              " cannot be broadcast to the logits ", logits);
    ENG_CHECK(mask.bias.dtype() == dtype, op, ": bias is ", mask.bias.dtype(), ", the logits are ", dtype);
  }
  if (mask.alibi_slopes.defined()) {
    ENG_CHECK(mask.alibi_slopes.dim() == 1 && mask.alibi_slopes.size(0) == H, op, ": alibi_slopes of shape ",
              mask.alibi_slopes.shape(), " must be [", H, "] (one slope per head)");
    ENG_CHECK(is_floating(mask.alibi_slopes.dtype()), op, ": alibi_slopes must be f32 or f64");
    ENG_CHECK(!(grad_enabled() && mask.alibi_slopes.requires_grad()), op,
              ": alibi_slopes are constants and must not require grad");
  }
}

Tensor dense_attention_mask(const AttentionMask& mask, int64_t B, int64_t H, int64_t Lq, int64_t Lk, DType dtype,
                            const char* op) {
  check_attention_mask(mask, B, H, Lq, Lk, dtype, op);
  if (!is_floating(dtype)) fail_not_floating(op);
  const Shape logits{B, H, Lq, Lk};
  std::vector<double> slopes(size_t(H), 0.0);
  if (mask.alibi_slopes.defined()) slopes = mask.alibi_slopes.to_vector();
  Tensor keep;
  Shape ks(4, 0);
  if (mask.keep.defined()) {
    keep = mask.keep.detach().to(DType::F64);
    ks = broadcast_strides(keep, logits);
  }
  Tensor out = empty(logits, dtype);
  ENG_DISPATCH(dtype, T, {
    T* o = out.data<T>();
    const double* kp = keep.defined() ? keep.data<double>() : nullptr;
    const T neg_inf = -std::numeric_limits<T>::infinity();
    parallel_for(0, B * H * Lq, std::max<int64_t>(1, 16384 / std::max<int64_t>(Lk, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t b = r / (H * Lq), h = r / Lq % H, i = r % Lq;
        const int64_t end = attention_key_end(mask, b, i, Lk);
        const double slope = slopes[size_t(h)];
        T* row = o + r * Lk;
        for (int64_t j = 0; j < Lk; ++j) {
          const bool hidden = j >= end || (kp && kp[b * ks[0] + h * ks[1] + i * ks[2] + j * ks[3]] == 0);
          row[j] = hidden ? neg_inf : T(-slope * double(std::abs(i + mask.query_offset - j)));
        }
      }
    });
  });
  return mask.bias.defined() ? add(out, mask.bias) : out;
}

void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  ENG_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": q, k, v must be [B, H, L, D], got q ", q.shape(),
            ", k ", k.shape(), ", v ", v.shape());
  ENG_CHECK(q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3), op,
            ": q ", q.shape(), " and k ", k.shape(), " differ in batch, heads or head dim");
  ENG_CHECK(k.size(0) == v.size(0) && k.size(1) == v.size(1) && k.size(2) == v.size(2), op, ": k ", k.shape(),
            " and v ", v.shape(), " differ in batch, heads or length");
  ENG_CHECK(q.dtype() == k.dtype() && k.dtype() == v.dtype(), op, ": q, k, v dtypes differ");
}

Tensor padded_keys(const std::vector<int64_t>& key_lengths, int64_t Lk, bool keys_on_rows) {
  const int64_t B = int64_t(key_lengths.size());
  std::vector<double> padded(size_t(B * Lk), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = std::max<int64_t>(key_lengths[size_t(b)], 0); j < Lk; ++j) padded[size_t(b * Lk + j)] = 1;
  return from_vector(padded, keys_on_rows ? Shape{B, 1, Lk, 1} : Shape{B, 1, 1, Lk}, DType::I64);
}

}  // namespace eng
