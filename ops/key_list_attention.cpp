#include "ops/key_list_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "ops/attention_mask.h"
#include "ops/kernel_util.h"

namespace eng {

ENG_REGISTER_OP("key_list_attention");

namespace {

// The problem both passes share: contiguous operands and the lists.
template <class T>
struct KeyListProblem {
  const KeyLists& L;
  int64_t H, Lq, Lk, D, Dv;
  double scale;
  const T *q, *k, *v;

  const int64_t* keys(int64_t bh, int64_t i) const { return &L.keys[size_t((bh * Lq + i) * L.kk)]; }
  // The logits of query i of head bh into l[0 … kk) (−inf on empty slots), in double.
  void logits(int64_t bh, int64_t i, double* l) const {
    const int64_t* js = keys(bh, i);
    const T* qi = q + (bh * Lq + i) * D;
    for (int64_t s = 0; s < L.kk; ++s) {
      if (js[s] < 0) {
        l[s] = -std::numeric_limits<double>::infinity();
        continue;
      }
      const T* kj = k + (bh * Lk + js[s]) * D;
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += double(qi[d]) * double(kj[d]);
      l[s] = dot * scale + (L.bias.empty() ? 0.0 : L.bias[size_t((bh * Lq + i) * L.kk + s)]);
    }
  }
};

// out [B·H·Lq, Dv] and lse [B·H·Lq]; one task per (batch, head).
template <class T>
void forward(const KeyListProblem<T>& P, int64_t BH, T* out, double* lse) {
  parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> l(static_cast<size_t>(P.L.kk)), acc(static_cast<size_t>(P.Dv));
    for (int64_t bh = lo; bh < hi; ++bh)
      for (int64_t i = 0; i < P.Lq; ++i) {
        P.logits(bh, i, l.data());
        const double m = *std::max_element(l.begin(), l.end());
        T* o = out + (bh * P.Lq + i) * P.Dv;
        if (m == -std::numeric_limits<double>::infinity()) {  // no key: zeros
          std::fill(o, o + P.Dv, T(0));
          lse[bh * P.Lq + i] = m;
          continue;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double total = 0;
        const int64_t* js = P.keys(bh, i);
        for (int64_t s = 0; s < P.L.kk; ++s) {
          if (js[s] < 0) continue;
          const double p = std::exp(l[size_t(s)] - m);
          total += p;
          const T* vj = P.v + (bh * P.Lk + js[s]) * P.Dv;
          for (int64_t e = 0; e < P.Dv; ++e) acc[size_t(e)] += p * double(vj[e]);
        }
        for (int64_t e = 0; e < P.Dv; ++e) o[e] = T(acc[size_t(e)] / total);
        lse[bh * P.Lq + i] = m + std::log(total);
      }
  });
}

// dq, dk, dv (zeroed) from the output's gradient g and the forward's out and lse; one task per (batch, head).
template <class T>
void backward(const KeyListProblem<T>& P, int64_t BH, const T* g, const T* out, const double* lse, T* dq, T* dk,
              T* dv) {
  parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> l(static_cast<size_t>(P.L.kk));
    for (int64_t bh = lo; bh < hi; ++bh)
      for (int64_t i = 0; i < P.Lq; ++i) {
        const double z = lse[bh * P.Lq + i];
        if (z == -std::numeric_limits<double>::infinity()) continue;  // no key: no gradient
        P.logits(bh, i, l.data());
        const int64_t row = bh * P.Lq + i;
        const T *gi = g + row * P.Dv, *oi = out + row * P.Dv, *qi = P.q + row * P.D;
        double delta = 0;
        for (int64_t e = 0; e < P.Dv; ++e) delta += double(gi[e]) * double(oi[e]);
        const int64_t* js = P.keys(bh, i);
        for (int64_t s = 0; s < P.L.kk; ++s) {
          if (js[s] < 0) continue;
          const double p = std::exp(l[size_t(s)] - z);
          const int64_t at = bh * P.Lk + js[s];
          const T* vj = P.v + at * P.Dv;
          double dp = 0;
          for (int64_t e = 0; e < P.Dv; ++e) dp += double(gi[e]) * double(vj[e]);
          const double dl = p * (dp - delta) * P.scale;
          const T* kj = P.k + at * P.D;
          for (int64_t d = 0; d < P.D; ++d) {
            dq[row * P.D + d] += T(dl * double(kj[d]));
            dk[at * P.D + d] += T(dl * double(qi[d]));
          }
          for (int64_t e = 0; e < P.Dv; ++e) dv[at * P.Dv + e] += T(p * double(gi[e]));
        }
      }
  });
}

}  // namespace

Tensor key_list_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const std::shared_ptr<const KeyLists>& lists, double scale) {
  const char* op = "key_list_attention";
  check_qkv(q, k, v, op);
  if (!is_floating(q.dtype())) fail_not_floating(op);
  ENG_CHECK(lists != nullptr, op, ": no key lists");
  ENG_CHECK(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), Dv = v.size(3), kk = lists->kk;
  const size_t slots = size_t(B * H * Lq * kk);
  ENG_CHECK(kk >= 0 && lists->keys.size() == slots && (lists->bias.empty() || lists->bias.size() == slots), op,
            ": the lists hold ", lists->keys.size(), " keys and ", lists->bias.size(), " biases, ", slots,
            " expected (", kk, " per query of q ", q.shape(), ")");
  for (int64_t j : lists->keys)
    ENG_CHECK(j >= -1 && j < Lk, op, ": a list names key ", j, ", outside [0, ", Lk, ") (−1: an empty slot)");
  if (kk == 0) return zeros({B, H, Lq, Dv}, q.dtype());
  const Tensor qd = q.detach().contiguous(), kd = k.detach().contiguous(), vd = v.detach().contiguous();
  Tensor out = empty({B, H, Lq, Dv}, q.dtype());
  auto lse = std::make_shared<std::vector<double>>(size_t(B * H * Lq));
  ENG_DISPATCH(q.dtype(), T, {
    const KeyListProblem<T> P{*lists, H, Lq, Lk, q.size(3), Dv, scale, qd.data<T>(), kd.data<T>(), vd.data<T>()};
    forward(P, B * H, out.data<T>(), lse->data());
  });
  return record(out, op, {q, k, v}, [qd, kd, vd, lists, scale, lse, o = out.detach()](const Tensor& grad) {
    const Tensor g = grad.contiguous();
    Tensor dq = zeros(qd.shape(), qd.dtype()), dk = zeros(kd.shape(), kd.dtype()), dv = zeros(vd.shape(), vd.dtype());
    ENG_DISPATCH(qd.dtype(), T, {
      const KeyListProblem<T> P{*lists,     qd.size(1), qd.size(2),     kd.size(2),     qd.size(3),
                                vd.size(3), scale,      qd.data<T>(),   kd.data<T>(),   vd.data<T>()};
      backward(P, qd.size(0) * qd.size(1), g.data<T>(), o.data<T>(), lse->data(), dq.data<T>(), dk.data<T>(),
               dv.data<T>());
    });
    return std::vector<Tensor>{dq, dk, dv};
  });
}

}  // namespace eng
