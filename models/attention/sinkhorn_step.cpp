// The recurrent form of causal Sinkhorn attention (models/attention/sinkhorn.h): step t appends k and v, and at the
// first position of block i >= 1 builds the block's sorted keys and values from row i of the causal sorting matrix,
//   X'_i = Σ_{blocks j < i} Σ_{t in j} k_t,   R_ij = X'_i · W_h[:, j] / τ   (j < i),
//   per iteration:  x ← x − logsumexp_j x;  L_j ← logaddexp(L_j, x_j);  x_j ← x_j − L_j
// (L_j the running log-sum-exp down column j over the rows so far: the parallel form's logcumsumexp), P_i = exp(x),
// ψ_S(K)_i = Σ_j P_ij K_j; then row t is one softmax over the block's own keys up to t and its c sorted slots.
#include <cmath>
#include <limits>
#include <vector>

#include "engine/error.h"
#include "models/attention/sinkhorn.h"

namespace eng {
namespace {

double log_add_exp(double a, double b) {
  if (a < b) std::swap(a, b);
  return a == -std::numeric_limits<double>::infinity() ? a : a + std::log1p(std::exp(b - a));
}

double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

}  // namespace

std::unique_ptr<AttentionState> SinkhornAttention::new_state() const {
  if (!causal_ || sortcut_ > 0) return nullptr;
  return std::make_unique<SinkhornState>();
}

void SinkhornAttention::sort_block(SinkhornState& s, int64_t H, int64_t blk) const {
  const Tensor& sum = s.summary;
  const int64_t B = sum.size(0), G = sum.size(1), D = sum.size(2), Dv = s.sorted_v.size(3), c = block_;
  const int64_t nbm = w_.size(2);
  double* x = s.summary.data<double>();
  std::vector<double> row(size_t(std::max(D, Dv)));
  for (int64_t bg = 0; bg < B * G; ++bg)  // X'_blk = X'_{blk-1} + the keys of block blk - 1
    for (int64_t r = 0; r < c; ++r) {
      s.k.read(bg, (blk - 1) * c + r, row.data());
      for (int64_t d = 0; d < D; ++d) x[bg * D + d] += row[size_t(d)];
    }
  const std::vector<double> w = w_.to_vector();  // [H, D, nb_max]
  std::vector<double> p(static_cast<size_t>(blk));
  double* lse = s.lse.data<double>();
  double* sk = s.sorted_k.data<double>();
  double* sv = s.sorted_v.data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bg = b * G + h / (H / G);
      for (int64_t j = 0; j < blk; ++j) {
        double r = 0;
        for (int64_t d = 0; d < D; ++d) r += x[bg * D + d] * w[size_t((h * D + d) * nbm + j)];
        p[size_t(j)] = r / temperature_;
      }
      for (int64_t it = 0; it < iters_; ++it) {
        double z = -std::numeric_limits<double>::infinity();
        for (double e : p) z = log_add_exp(z, e);
        double* col = lse + ((b * H + h) * iters_ + it) * nbm;
        for (int64_t j = 0; j < blk; ++j) {
          p[size_t(j)] -= z;
          col[j] = log_add_exp(col[j], p[size_t(j)]);
          p[size_t(j)] -= col[j];
        }
      }
      double* ok = sk + (b * H + h) * c * D;
      double* ov = sv + (b * H + h) * c * Dv;
      std::fill(ok, ok + c * D, 0.0);
      std::fill(ov, ov + c * Dv, 0.0);
      for (int64_t j = 0; j < blk; ++j) {
        const double pj = std::exp(p[size_t(j)]);
        for (int64_t r = 0; r < c; ++r) {
          s.k.read(bg, j * c + r, row.data());
          for (int64_t d = 0; d < D; ++d) ok[r * D + d] += pj * row[size_t(d)];
          s.v.read(bg, j * c + r, row.data());
          for (int64_t d = 0; d < Dv; ++d) ov[r * Dv + d] += pj * row[size_t(d)];
        }
      }
    }
}

Tensor SinkhornAttention::attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                                      const AttentionMask&) {
  auto* s = dynamic_cast<SinkhornState*>(&state);
  const std::string who = "attention 'sinkhorn' step";
  ENG_CHECK(s, who, ": the state was not made by this variant's new_state()");
  const int64_t t = s->length, B = q.size(0), H = q.size(1), D = q.size(3), G = k.size(1), Dv = v.size(3);
  const int64_t c = block_, blk = t / c;
  check_step_length(who, t, s->k.stored());
  ENG_CHECK(H == heads_ && D == head_dim_, who, ": q ", q.shape(), " needs ", heads_, " heads of dim ", head_dim_,
            " (the sorting network is [", heads_, ", ", head_dim_, ", nb])");
  ENG_CHECK(t < max_len_, who, ": position ", t, " is past max_len ", max_len_,
            " that the sorting network was built for");
  s->k.append(k, who);
  s->v.append(v, who);
  if (t == 0) {
    s->summary = zeros({B, G, D}, DType::F64);
    s->lse = full({B, H, iters_, w_.size(2)}, -std::numeric_limits<double>::infinity(), DType::F64);
    s->sorted_k = zeros({B, H, c, D}, DType::F64);
    s->sorted_v = zeros({B, H, c, Dv}, DType::F64);
  }
  if (blk > 0 && t % c == 0) sort_block(*s, H, blk);
  // Row t: the block's own keys blk·c … t, then (block > 0) its c sorted slots, one softmax (§3.2).
  const std::vector<double> qv = q.to_vector();
  const double scale = 1.0 / std::sqrt(double(D));
  const int64_t local = t - blk * c + 1, n = local + (blk > 0 ? c : 0);
  std::vector<double> logits(static_cast<size_t>(n)), values(size_t(n * Dv)), key(static_cast<size_t>(D)),
      out(size_t(B * H * Dv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bg = b * G + h / (H / G), bh = b * H + h;
      const double* qr = &qv[size_t(bh * D)];
      for (int64_t e = 0; e < local; ++e) {
        s->k.read(bg, blk * c + e, key.data());
        logits[size_t(e)] = dot(qr, key.data(), D) * scale;
        s->v.read(bg, blk * c + e, &values[size_t(e * Dv)]);
      }
      for (int64_t e = local; e < n; ++e) {
        const int64_t slot = e - local;
        logits[size_t(e)] = dot(qr, s->sorted_k.data<double>() + (bh * c + slot) * D, D) * scale;
        const double* vr = s->sorted_v.data<double>() + (bh * c + slot) * Dv;
        std::copy(vr, vr + Dv, &values[size_t(e * Dv)]);
      }
      softmax_row(logits, values, Dv, &out[size_t(bh * Dv)]);
    }
  return from_vector(out, {B, H, 1, Dv}, q.dtype());
}

}  // namespace eng
