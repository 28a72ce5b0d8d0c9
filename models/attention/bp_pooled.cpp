// `bp-transformer` with nodes=pooled: the variant takes exactly T tokens and builds the span nodes of the binary
// partition itself, from the tokens' keys and values (a simplification of BP-Transformer's node states: a node is
// not a position with its own hidden state across layers; each layer pools its own keys and values):
//   key(l, m) = mean of k_j over span m of level l, j in [m 2^l, min((m + 1) 2^l, T)), and value(l, m) likewise.
// Token i attends, in one softmax, to tokens j with |i - j| <= k (causal: 0 <= i - j <= k) and to nodes (l, m), l >= 1,
// with 1 <= |m - floor(i / 2^l)| <= k (causal: 1 <= floor(i / 2^l) - m <= k: complete spans before i's own, whose
// tokens are all < i). A key both as a token and inside a node counts twice, as in the appended form.
//
// Parallel form: the keys and values become [tokens; nodes] (with_span_nodes, differentiable ops) and the appended
// form's pattern runs over them with the T token rows as queries: O(T k log T D) time, O(T D) extra memory.
// Recurrent form: the state holds the last k + 1 tokens, per level l >= 1 a ring of the last k complete nodes, and
// per level l >= 0 the sum of the last complete span of even index awaiting its sibling (a binary counter): a span
// completes when its last token arrives. O(k log t D) per step and in memory. Node sums add in the tensor's dtype
// in the order the parallel form adds them (left + right, level by level), and the means multiply by 2^-l (exact),
// so both forms see bit-identical nodes; the step's softmax then runs in double.
#include <algorithm>
#include <cmath>
#include <string>

#include "engine/autograd.h"
#include "engine/error.h"
#include "models/attention/bp_transformer.h"
#include "models/attention/row_cache.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/reduce.h"
#include "ops/view.h"

namespace eng {
namespace {

// x [B, H, T, D] -> [B, H, T + nodes, D] in the layout of BinaryPartition(T): the tokens, then level by level the
// span means. Level l's sums are level l - 1's added in pairs (a zero after an odd count); the last span of a level
// may be short, and its mean divides by its own count.
Tensor with_span_nodes(const Tensor& x, const BinaryPartition& p) {
  const int64_t B = x.size(0), H = x.size(1), D = x.size(3);
  std::vector<Tensor> parts{x};
  Tensor sums = x;
  for (int64_t l = 1; l < p.levels(); ++l) {
    const int64_t half = p.count[size_t(l)];
    if (sums.size(2) % 2) sums = concat({sums, zeros({B, H, 1, D}, x.dtype())}, 2);
    sums = sum(reshape(sums, {B, H, half, 2, D}), {3});
    std::vector<double> inv(size_t(half), std::ldexp(1.0, -int(l)));
    inv.back() = 1.0 / double(p.tokens - (half - 1) * (int64_t(1) << l));
    parts.push_back(mul(sums, from_vector(inv, {half, 1}, x.dtype())));
  }
  return concat(parts, 2);
}

// One side (keys or values, W wide) of the recurrent state, for BG = batch x K/V heads rows; f64 tensors, so that
// the allocator's counters see the state (bench generate).
struct PooledSide {
  Tensor tokens;                   // [BG, k + 1, W]: token j in slot j mod (k + 1)
  std::vector<Tensor> ring, pend;  // ring[l] (l >= 1): [BG, k, W], node (l, m) in slot m mod k; pend[l]: [BG, W]
};

struct PooledState : AttentionState {
  int64_t BG = 0, D = 0, Dv = 0, stored = 0;
  DType dtype = DType::F32;
  PooledSide keys, values;
};

// Token t's row c climbs the tree: at level l its span index is m = t >> l; an even m waits in pend[l] for its
// sibling, an odd m completes node (l + 1, m >> 1) = pend[l] + c, whose mean enters level l + 1's ring.
template <class T>
void climb(PooledSide& s, int64_t BG, int64_t bg, int64_t W, int64_t k, int64_t t, std::vector<double> c) {
  for (size_t l = 0;; ++l) {
    if (s.pend.size() <= l) s.pend.push_back(zeros({BG, W}, DType::F64));
    double* pend = s.pend[l].data<double>() + bg * W;
    const int64_t m = t >> l;
    if (m % 2 == 0) {
      std::copy(c.begin(), c.end(), pend);
      return;
    }
    const T inv = T(std::ldexp(1.0, -int(l + 1)));
    if (s.ring.size() <= l + 1) s.ring.resize(l + 2);
    if (!s.ring[l + 1].defined()) s.ring[l + 1] = zeros({BG, k, W}, DType::F64);
    double* node = s.ring[l + 1].data<double>() + (bg * k + (m >> 1) % k) * W;
    for (int64_t w = 0; w < W; ++w) {
      c[size_t(w)] = double(T(pend[w]) + T(c[size_t(w)]));
      node[w] = double(T(c[size_t(w)]) * inv);
    }
  }
}

class BPPooledAttention : public SparseAttention {
 public:
  BPPooledAttention(const AttentionConfig& c, int64_t window, PatternBuilder tree)
      : SparseAttention("bp-transformer", c, std::move(tree)), k_(window), causal_(c.causal) {
    accepts_.key_lengths = accepts_.alibi = accepts_.query_offset = accepts_.cross = false;
    accepts_.why_not = "nodes=pooled pools every key given into the span nodes, and its queries are the keys' tokens";
  }
  std::unique_ptr<AttentionState> new_state() const override {
    return causal_ ? std::make_unique<PooledState>() : nullptr;
  }

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override {
    const BinaryPartition p(k.size(2));
    return SparseAttention::attend(q, with_span_nodes(k, p), with_span_nodes(v, p), mask);
  }
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask&) override;

 private:
  void start(PooledState& s, const Tensor& k, const Tensor& v) const;
  int64_t k_;
  bool causal_;
};

void BPPooledAttention::start(PooledState& s, const Tensor& k, const Tensor& v) const {
  const char* who = "attention 'bp-transformer' step";
  ENG_CHECK(k.dtype() == DType::F32 || k.dtype() == DType::F64, who, ": k and v must be f32 or f64");
  if (s.stored == 0) {
    s.BG = k.size(0) * k.size(1), s.D = k.size(3), s.Dv = v.size(3), s.dtype = k.dtype();
    s.keys.tokens = zeros({s.BG, k_ + 1, s.D}, DType::F64);
    s.values.tokens = zeros({s.BG, k_ + 1, s.Dv}, DType::F64);
  }
  ENG_CHECK(k.size(0) * k.size(1) == s.BG && k.size(3) == s.D && v.size(3) == s.Dv && k.dtype() == s.dtype, who,
            ": k ", k.shape(), " and v ", v.shape(), " do not fit the state's first step");
}

Tensor BPPooledAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                      const AttentionMask&) {
  auto* s = dynamic_cast<PooledState*>(&state);
  ENG_CHECK(s != nullptr, "attention 'bp-transformer' step: the state is not one new_state() made");
  check_step_length("attention 'bp-transformer' step", state.length, s->stored);
  start(*s, k, v);
  NoGradGuard no_grad;
  const int64_t B = q.size(0), H = q.size(1), G = k.size(1), D = s->D, Dv = s->Dv, t = s->stored, K = k_;
  const std::vector<double> qq = q.to_vector(), kk = k.to_vector(), vv = v.to_vector();
  double* tok_k = s->keys.tokens.data<double>();
  double* tok_v = s->values.tokens.data<double>();
  for (int64_t bg = 0; bg < s->BG; ++bg) {  // token t enters its ring slot before its row reads it
    std::copy_n(kk.begin() + bg * D, D, tok_k + (bg * (K + 1) + t % (K + 1)) * D);
    std::copy_n(vv.begin() + bg * Dv, Dv, tok_v + (bg * (K + 1) + t % (K + 1)) * Dv);
  }
  const double scale = scale_for(D);
  std::vector<double> out(size_t(B * H * Dv)), logits, vals;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bg = b * G + h / (H / G);
      const double* qh = &qq[size_t((b * H + h) * D)];
      logits.clear(), vals.clear();
      auto add = [&](const double* key, const double* value) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qh[d] * key[d];
        logits.push_back(dot * scale);
        vals.insert(vals.end(), value, value + Dv);
      };
      for (int64_t j = std::max<int64_t>(t - K, 0); j <= t; ++j)
        add(tok_k + (bg * (K + 1) + j % (K + 1)) * D, tok_v + (bg * (K + 1) + j % (K + 1)) * Dv);
      // Nodes of the complete spans before t's own, read before token t completes any span.
      for (int64_t l = 1; K > 0 && (t >> l) >= 1; ++l)
        for (int64_t m = std::max<int64_t>((t >> l) - K, 0); m < (t >> l); ++m)
          add(s->keys.ring[size_t(l)].data<double>() + (bg * K + m % K) * D,
              s->values.ring[size_t(l)].data<double>() + (bg * K + m % K) * Dv);
      softmax_row(logits, vals, Dv, &out[size_t((b * H + h) * Dv)]);
    }
  for (int64_t bg = 0; K > 0 && bg < s->BG; ++bg) {  // nodes are read only when k > 0
    const std::vector<double> kr(kk.begin() + bg * D, kk.begin() + (bg + 1) * D);
    const std::vector<double> vr(vv.begin() + bg * Dv, vv.begin() + (bg + 1) * Dv);
    ENG_DISPATCH(s->dtype, T, climb<T>(s->keys, s->BG, bg, D, K, t, kr); climb<T>(s->values, s->BG, bg, Dv, K, t, vr));
  }
  ++s->stored;
  return from_vector(out, {B, H, 1, Dv}, q.dtype());
}

}  // namespace

std::unique_ptr<Attention> make_bp_pooled(const AttentionConfig& c, int64_t window, PatternBuilder tree) {
  return std::make_unique<BPPooledAttention>(c, window, std::move(tree));
}

}  // namespace eng
