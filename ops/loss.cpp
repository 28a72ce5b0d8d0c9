#include "ops/loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"

namespace eng {

ENG_REGISTER_OP("cross_entropy");

namespace {

// What the rows of one cross-entropy call share: q_j = on * [j == target] + uniform is the target
// distribution (on = 1 - eps, uniform = eps / C).
struct CrossEntropyRows {
  int64_t N, C, ignore_index;
  double on, uniform;
  const int64_t* target;
  int64_t grain() const { return std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1)); }
};

// Per row: lse = log sum_j exp(x_j) (shifted by the row max for stability), and the loss
// -sum_j q_j log p_j = lse - sum_j q_j x_j (as sum_j q_j = 1). Ignored rows keep loss 0.
template <class T>
void cross_entropy_forward(const CrossEntropyRows& p, const T* x, double* lse, double* loss) {
  parallel_for(0, p.N, p.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t t = p.target[r];
      if (t == p.ignore_index) continue;
      const T* row = x + r * p.C;
      double mx = double(row[0]), sum = 0, total = 0;
      for (int64_t j = 1; j < p.C; ++j) mx = std::max(mx, double(row[j]));
      for (int64_t j = 0; j < p.C; ++j) {
        sum += std::exp(double(row[j]) - mx);
        total += double(row[j]);
      }
      lse[r] = mx + std::log(sum);
      loss[r] = lse[r] - p.on * double(row[t]) - p.uniform * total;
    }
  });
}

// dx_j = (softmax_j - q_j) * scale for kept rows, 0 for ignored ones (gx starts zeroed).
template <class T>
void cross_entropy_backward(const CrossEntropyRows& p, const T* x, const double* lse, double scale, T* gx) {
  parallel_for(0, p.N, p.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t t = p.target[r];
      if (t == p.ignore_index) continue;
      const T* row = x + r * p.C;
      T* grow = gx + r * p.C;
      for (int64_t j = 0; j < p.C; ++j) grow[j] = T((std::exp(double(row[j]) - lse[r]) - p.uniform) * scale);
      grow[t] -= T(p.on * scale);
    }
  });
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double label_smoothing) {
  ENG_CHECK(logits.defined() && targets.defined(), "cross_entropy: undefined tensor argument");
  ENG_CHECK(is_floating(logits.dtype()), "cross_entropy: logits must be f32 or f64, got ", logits.dtype(), " ",
            logits.shape());
  ENG_CHECK(logits.dim() >= 1, "cross_entropy: logits of shape ", logits.shape(), " need a class axis");
  ENG_CHECK(targets.dtype() == DType::I64, "cross_entropy: targets must be i64, got ", targets.dtype(), " ",
            targets.shape());
  const Shape rows_shape(logits.shape().begin(), logits.shape().end() - 1);
  ENG_CHECK(targets.shape() == rows_shape, "cross_entropy: targets of shape ", targets.shape(),
            " do not match logits of shape ", logits.shape(), " without its class axis");
  ENG_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got ",
            label_smoothing);
  const int64_t C = logits.shape().back(), N = targets.numel();
  Tensor tc = targets.contiguous();
  const int64_t* t = tc.data<int64_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < N; ++r) {
    if (t[r] == ignore_index) continue;
    ENG_CHECK(t[r] >= 0 && t[r] < C, "cross_entropy: target ", t[r], " out of range [0, ", C,
              ") for logits of shape ", logits.shape(), " (ignore_index is ", ignore_index, ")");
    ++count;
  }
  const double uniform = C > 0 ? label_smoothing / double(C) : 0.0;
  const CrossEntropyRows rows{N, C, ignore_index, 1 - label_smoothing, uniform, t};

  Tensor lc = logits.contiguous();
  Tensor lse = empty({N}, DType::F64);  // kept for the backward instead of a softmax tensor
  std::vector<double> loss(size_t(N), 0.0);
  ENG_DISPATCH(logits.dtype(), T, cross_entropy_forward(rows, lc.data<T>(), lse.data<double>(), loss.data()));
  double total = 0;  // summed serially, so the result does not depend on the thread count
  for (double v : loss) total += v;
  Tensor out = scalar_tensor(count > 0 ? total / double(count) : 0.0, logits.dtype());
  return record(out, "cross_entropy", {lc, targets}, [x = lc.detach(), tc, lse, rows, count](const Tensor& g) {
    Tensor gx = zeros(x.shape(), x.dtype());
    const double scale = count > 0 ? g.item() / double(count) : 0.0;
    ENG_DISPATCH(x.dtype(), T,
                 cross_entropy_backward(rows, x.data<T>(), lse.data<double>(), scale, gx.data<T>()));
    return std::vector<Tensor>{gx, Tensor()};
  });
}

}  // namespace eng
