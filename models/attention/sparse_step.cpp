// The recurrent form of position-based sparse attention (models/attention/sparse_attention.h): step t writes the
// new position's k and v into the state and computes row t of the causal pattern,
//   out_h = sum_j softmax_j(q_h . k_j * scale - slope_h |t - j|) v_j   over j <= t with allowed(h, t, j),
// the row the parallel form's block-sparse kernel computes (a row without keys is zeros there and here).
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/error.h"
#include "models/attention/sparse_attention.h"

namespace eng {
namespace {

// A buffer of `slots` positions like `like` [B, G, 1, D], holding the first `kept` slots of `old` (if any); zeros
// elsewhere, so that a regrown ring copies no unwritten memory.
Tensor regrow(const Tensor& old, const Tensor& like, int64_t slots, int64_t kept) {
  Tensor buf = zeros({like.size(0), like.size(1), slots, like.size(3)}, like.dtype());
  if (kept > 0) {
    const Shape shape{like.size(0), like.size(1), kept, like.size(3)};
    buf.as_strided(shape, buf.strides(), 0).copy_from(old.as_strided(shape, old.strides(), old.offset()));
  }
  return buf;
}

void write_slot(const Tensor& buf, const Tensor& x, int64_t slot) {
  buf.as_strided(x.shape(), buf.strides(), buf.offset() + slot * buf.strides()[2]).copy_from(x);
}

// The keys row t of head h reads, ascending: the positions j <= t of the blocks key_blocks lists for t's block
// that the rule admits.
std::vector<int64_t> row_keys(const SparsePattern& p, int64_t h, int64_t t) {
  const int64_t bs = p.geometry().block;
  std::vector<int64_t> blocks;
  p.key_blocks(h, t / bs, blocks);
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  std::vector<int64_t> keys;
  for (int64_t kb : blocks)
    for (int64_t j = kb * bs; j < std::min((kb + 1) * bs, t + 1); ++j)
      if (p.allowed(h, t, j)) keys.push_back(j);
  return keys;
}

// The keys one head reads: their positions and the state's slots that hold them.
struct RowKeys {
  std::vector<int64_t> pos, slot;
};

// out [B, H, 1, Dv] from q [B, H, 1, D] and the state's keys, all contiguous; head h reads keys[h] from group
// h / (H / G).
template <class T>
void attend_rows(const Tensor& q, const SparseKVState& s, const std::vector<RowKeys>& keys,
                 const std::vector<double>& slopes, double scale, int64_t t, const Tensor& out) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), G = s.k.size(1), S = s.slots(), Dv = s.v.size(3);
  const T* qp = q.data<T>();
  const T* kp = s.k.data<T>();
  const T* vp = s.v.data<T>();
  T* op = out.data<T>();
  std::vector<double> w;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const std::vector<int64_t>& js = keys[size_t(h)].pos;
      const std::vector<int64_t>& slots = keys[size_t(h)].slot;
      const int64_t g = h / (H / G);
      const T* qr = qp + (b * H + h) * D;
      w.assign(js.size(), 0.0);
      double top = -std::numeric_limits<double>::infinity();
      for (size_t n = 0; n < js.size(); ++n) {
        const T* kr = kp + ((b * G + g) * S + slots[n]) * D;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double(qr[d]) * double(kr[d]);
        w[n] = dot * scale - (slopes.empty() ? 0.0 : slopes[size_t(h)] * double(t - js[n]));
        top = std::max(top, w[n]);
      }
      double total = 0;
      for (double& x : w) total += (x = std::exp(x - top));
      T* orow = op + (b * H + h) * Dv;
      for (int64_t d = 0; d < Dv; ++d) {
        double acc = 0;
        for (size_t n = 0; n < js.size(); ++n) acc += w[n] * double(vp[((b * G + g) * S + slots[n]) * Dv + d]);
        orow[d] = T(js.empty() ? 0.0 : acc / total);
      }
    }
}

}  // namespace

std::unique_ptr<AttentionState> SparseAttention::new_state() const {
  if (!causal_ || !no_causal_.empty() || !step_.none.empty()) return nullptr;
  auto s = std::make_unique<SparseKVState>();
  s->ring = step_.reach >= 0 ? step_.reach + 1 : 0;
  return s;
}

Tensor SparseAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                    const AttentionMask& mask) {
  auto* s = dynamic_cast<SparseKVState*>(&state);
  const std::string who = "attention '" + name_ + "' step";
  ENG_CHECK(s, who, ": the state was not made by this variant's new_state()");
  ENG_CHECK(q.device() == Device::CPU, who, ": runs on the CPU, got a ", device_name(q.device()), " tensor");
  const int64_t t = s->length, H = q.size(1);  // this position; the caller advances length afterwards
  ENG_CHECK(t == s->stored || t + 1 == s->stored, who, ": state.length is ", t, " but the state holds ", s->stored,
            " positions (advance length by one after each step)");
  if (s->k.defined())
    ENG_CHECK(k.size(0) == s->k.size(0) && k.size(1) == s->k.size(1) && k.size(3) == s->k.size(3) &&
                  v.size(3) == s->v.size(3) && k.dtype() == s->k.dtype(),
              who, ": k ", k.shape(), " and v ", v.shape(), " do not match the state's keys ", s->k.shape(),
              " and values ", s->v.shape());
  const int64_t kept = s->ring > 0 && step_.kept ? step_.kept(t) : -1;  // t's index among the kept positions
  if (s->ring > 0 && (!s->k.defined() || s->ring + kept >= s->slots())) {
    const int64_t had = s->slots(), part = s->k.defined() ? had - s->ring : 0;  // the kept part doubles
    const int64_t slots = s->ring + (kept < 0 ? part : std::max(kept + 1, 2 * part));
    s->k = regrow(s->k, k, slots, had);
    s->v = regrow(s->v, v, slots, had);
  } else if (s->ring == 0 && t >= s->slots()) {
    const int64_t slots = std::max<int64_t>(16, 2 * t);
    s->k = regrow(s->k, k, slots, t);
    s->v = regrow(s->v, v, slots, t);
  }
  const int64_t slot = s->ring > 0 ? t % s->ring : t;
  write_slot(s->k, k, slot);
  write_slot(s->v, v, slot);
  if (kept >= 0) {
    write_slot(s->k, k, s->ring + kept);
    write_slot(s->v, v, s->ring + kept);
  }
  s->stored = t + 1;
  if (!s->pattern || s->pattern->geometry().heads != H || t >= s->pattern->geometry().n)
    s->pattern = builder_(PatternGeometry{std::max<int64_t>(2 * (t + 1), block_), H, block_, true});
  const SparsePattern& p = *s->pattern;
  std::vector<RowKeys> keys(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) {
    RowKeys& r = keys[size_t(h)];
    r.pos = row_keys(p, p.heads() == 1 ? 0 : h, t);
    for (int64_t j : r.pos) {
      const int64_t index = s->ring > 0 && t - j >= s->ring ? (step_.kept ? step_.kept(j) : -1) : 0;
      ENG_CHECK(index >= 0, who, ": the pattern reads position ", j, " from position ", t, ", beyond the ring of ",
                s->ring, " positions and not among the positions the variant declared it keeps");
      r.slot.push_back(s->ring == 0 ? j : t - j < s->ring ? j % s->ring : s->ring + index);
    }
  }
  std::vector<double> slopes;
  if (mask.alibi_slopes.defined()) slopes = mask.alibi_slopes.to_vector();
  Tensor out = empty({q.size(0), H, 1, v.size(3)}, q.dtype());
  const Tensor qc = q.contiguous();
  const double scale = scale_for(q.size(3));
  ENG_DISPATCH(q.dtype(), T, attend_rows<T>(qc, *s, keys, slopes, scale, t, out));
  return out;
}

}  // namespace eng
