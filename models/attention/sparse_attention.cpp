#include "models/attention/sparse_attention.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "ops/attention_block_sparse.h"

namespace eng {
namespace {
constexpr int64_t kMaxBlock = 256;  // a thread holds two block x block tiles
constexpr size_t kMaxCached = 8;    // layouts kept per variant instance
}  // namespace

int64_t sparse_block(const AttentionConfig& c) {
  return c.options.get_int("block", 64, IntRange{1, kMaxBlock});
}

SparseAttention::SparseAttention(std::string name, const AttentionConfig& config, PatternBuilder builder,
                                 std::string no_causal, SparseStep step)
    : name_(std::move(name)),
      no_causal_(std::move(no_causal)),
      builder_(std::move(builder)),
      block_(sparse_block(config)),
      causal_(config.causal),
      step_(std::move(step)) {
  accepts_.causal = accepts_.query_offset = no_causal_.empty();
  accepts_.alibi = true;
  accepts_.cross = true;  // fewer queries than keys: positions query_offset .. of the key sequence (checked by layout)
  accepts_.grouped_step = true;
  accepts_.why_not = "the pattern is the mask";
  if (!no_causal_.empty()) accepts_.why_not += ", and it has no causal form: " + no_causal_;
  accepts_.no_step = !no_causal_.empty() ? "it has no causal form (" + no_causal_ + ")"
                     : !causal_          ? "built non-causal, and the recurrent form is the causal pattern's"
                                         : step_.none;
  scale_ = config.options.get_double("scale", 0.0, RealRange::above(0));  // 0: 1/sqrt(D)
}

std::shared_ptr<const BlockSparseLayout> SparseAttention::layout(int64_t heads, int64_t Lq, int64_t Lk,
                                                                 int64_t query_offset, bool causal) {
  ENG_CHECK(query_offset >= 0 && Lq + query_offset <= Lk, "attention '", name_,
            "': a position-based pattern needs its queries inside the key sequence, got ", Lq,
            " queries from position ", query_offset, " against ", Lk, " keys");
  ENG_CHECK(!causal || no_causal_.empty(), "attention '", name_, "': no causal form (", no_causal_, ")");
  const auto key = std::make_tuple(heads, Lq, Lk, query_offset, causal);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const PatternPtr p = builder_(PatternGeometry{Lk, heads, block_, causal});
  const int64_t bs = block_, off = query_offset;
  // Query block qb of the input holds positions off + qb * bs ..: the pattern's blocks it overlaps answer for it.
  auto list = [&](int64_t h, int64_t qb, std::vector<int64_t>& out) {
    const int64_t first = qb * bs + off, last = std::min(Lq, (qb + 1) * bs) - 1 + off;
    for (int64_t pb = first / bs; pb <= last / bs; ++pb) p->key_blocks(h, pb, out);
  };
  auto rule = [&](int64_t h, int64_t i, int64_t j) { return p->allowed(h, i + off, j); };
  auto made = std::make_shared<const BlockSparseLayout>(build_block_sparse_layout(p->heads(), Lq, Lk, bs, list, rule));
  if (cache_.size() >= kMaxCached) cache_.clear();
  cache_[key] = made;
  return made;
}

double SparseAttention::scale_for(int64_t head_dim) const {
  return scale_ > 0 ? scale_ : 1.0 / std::sqrt(double(head_dim));
}

Tensor SparseAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const double scale = scale_for(q.size(3));
  AttentionMask m = mask;
  m.causal = false;  // the pattern's rule decides causality
  return block_sparse_attention(
      q, k, v, m, layout(q.size(1), q.size(2), k.size(2), mask.query_offset, causal_ || mask.causal), scale);
}

}  // namespace eng
