#include "models/attention/exact_topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/error.h"
#include "models/attention/softmax.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/matmul.h"
#include "ops/select.h"
#include "ops/softmax.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_ATTENTION(exact_topk, "exact-topk",
                       "exact top-k attention (the oracle of Vyas et al. 2020): softmax over each query's k keys of "
                       "largest logit, O(N^2 D) time, O(N k) memory, causal or not",
                       [](const AttentionConfig& c) { return std::make_unique<ExactTopkAttention>(c); });

void top_keys(const double* scores, int64_t end, int64_t kk, int64_t* out) {
  std::vector<int64_t> idx(static_cast<size_t>(std::max<int64_t>(end, 0)));
  std::iota(idx.begin(), idx.end(), int64_t(0));
  const int64_t n = std::min<int64_t>(kk, int64_t(idx.size()));
  // a strict weak order: larger score first, then lower index, so equal scores keep position order
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [scores](int64_t a, int64_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  for (int64_t s = 0; s < kk; ++s) out[s] = s < n ? idx[size_t(s)] : -1;
}

KeyListAttention gather_key_lists(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& keys,
                                  int64_t kk) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Lk = k.size(2), Dv = v.size(3);
  ENG_CHECK(kk >= 1 && Lk >= 1 && int64_t(keys.size()) == B * H * Lq * kk, "gather_key_lists: ", keys.size(),
            " keys do not fill ", kk, " slots per query of q ", q.shape(), " over k ", k.shape());
  std::vector<double> flat(keys.size()), empty(keys.size());
  for (size_t s = 0; s < keys.size(); ++s) {
    const int64_t bh = int64_t(s) / (Lq * kk), j = keys[s];
    flat[s] = double(bh * Lk + std::max<int64_t>(j, 0));  // an empty slot reads key 0 and is masked below
    empty[s] = j < 0;
  }
  const Tensor idx = from_vector(flat, {int64_t(keys.size())}, DType::I64);
  const Tensor kg = reshape(index_select(reshape(k, {B * H * Lk, D}), 0, idx), {B, H, Lq, kk, D});
  const Tensor vg = reshape(index_select(reshape(v, {B * H * Lk, Dv}), 0, idx), {B, H, Lq, kk, Dv});
  const Tensor logits = mul_scalar(matmul(unsqueeze(q, 3), transpose(kg, -2, -1)), 1.0 / std::sqrt(double(D)));
  return {masked_fill(logits, from_vector(empty, {B, H, Lq, 1, kk}, DType::I64),
                      -std::numeric_limits<double>::infinity()),
          vg};
}

Tensor apply_key_lists(const Tensor& weights, const KeyListAttention& lists) {
  const Shape& s = lists.values.shape();
  return reshape(matmul(weights, lists.values), {s[0], s[1], s[2], s[4]});
}

ExactTopkAttention::ExactTopkAttention(const AttentionConfig& config)
    : topk_(config.options.get_int("topk", 32, IntRange::at_least(1))) {
  accepts_.query_offset = accepts_.cross = accepts_.grouped_step = true;
  accepts_.why_not = "the top k keys are chosen on plain logits";
}

std::vector<int64_t> ExactTopkAttention::select(const Tensor& q, const Tensor& k, const AttentionMask& mask,
                                                int64_t kk) const {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Lk = k.size(2);
  const std::vector<double> qv = q.to_vector(), kv = k.to_vector();
  std::vector<int64_t> out(size_t(B * H * Lq * kk));
  std::vector<double> row(static_cast<size_t>(Lk));  // one query's logits (unscaled: 1/√D keeps the order)
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < Lq; ++i) {
      const int64_t end = attention_key_end(mask, bh / H, i, Lk);
      const double* qi = &qv[size_t((bh * Lq + i) * D)];
      for (int64_t j = 0; j < end; ++j) {
        const double* kj = &kv[size_t((bh * Lk + j) * D)];
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += qi[d] * kj[d];
        row[size_t(j)] = s;
      }
      top_keys(row.data(), end, kk, &out[size_t((bh * Lq + i) * kk)]);
    }
  return out;
}

Tensor ExactTopkAttention::selected(const Tensor& q, const Tensor& k, const AttentionMask& mask) const {
  const std::string who = "attention '" + name() + "' selected";
  check_qkv(q, k, k, who.c_str());
  check_attention_mask(mask, q.size(0), q.size(1), q.size(2), k.size(2), q.dtype(), who.c_str());
  check_accepted(mask, q.size(2), k.size(2), " selected");
  const int64_t kk = std::min(topk_, k.size(2));
  const std::vector<int64_t> sel = select(q, k, mask, kk);
  return from_vector(std::vector<double>(sel.begin(), sel.end()), {q.size(0), q.size(1), q.size(2), kk},
                     DType::I64);
}

Tensor ExactTopkAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const int64_t kk = std::min(topk_, k.size(2));
  if (kk == 0 || q.size(2) == 0) return zeros({q.size(0), q.size(1), q.size(2), v.size(3)}, q.dtype());
  const KeyListAttention lists = gather_key_lists(q, k, v, select(q, k, mask, kk), kk);
  return apply_key_lists(softmax(lists.logits, -1), lists);  // an all-empty row: softmax zeros, output zeros
}

std::unique_ptr<AttentionState> ExactTopkAttention::new_state() const { return std::make_unique<KVCacheState>(); }

Tensor ExactTopkAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                      const AttentionMask& mask) {
  return kv_cache_step(*this, q, k, v, state, mask);
}

}  // namespace eng
