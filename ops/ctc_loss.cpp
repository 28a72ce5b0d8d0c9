#include "ops/ctc_loss.h"

#include <cmath>
#include <limits>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"

namespace eng {

ENG_REGISTER_OP("ctc_loss");

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double log_add(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  return a > b ? a + std::log1p(std::exp(b - a)) : b + std::log1p(std::exp(a - b));
}

struct CTCShape {
  int64_t T, C, S, blank;
  const int64_t* targets;  // [B, S]
};

// One sequence: the forward variables alpha_t(s) (log, including frame t's emission) over the extended
// labels l' = (blank, l1, blank, l2, ..., blank), and -log p. With `grad`, also the backward variables
// beta_t(s) (log, emissions after t only), so that alpha_t(s) + beta_t(s) is the log-probability of the
// alignments through state s at frame t, and the gradient of -log p with respect to x_t(k) is minus the
// sum of those over the states labelled k, divided by p.
template <class T>
double ctc_sequence(const CTCShape& p, int64_t b, int64_t Tb, int64_t Sb, const T* x, T* grad) {
  const int64_t L = 2 * Sb + 1;
  if (Tb == 0) return Sb == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  std::vector<int64_t> label(size_t(L), p.blank);
  for (int64_t i = 0; i < Sb; ++i) label[size_t(2 * i + 1)] = p.targets[b * p.S + i];
  // A skip from s - 2 to s is allowed unless s is a blank or repeats the label at s - 2.
  auto skip = [&](int64_t s) {
    return s >= 2 && label[size_t(s)] != p.blank && label[size_t(s)] != label[size_t(s - 2)];
  };
  auto emit = [&](int64_t t, int64_t s) { return double(x[t * p.C + label[size_t(s)]]); };

  std::vector<double> alpha(size_t(Tb * L), kNegInf);
  alpha[0] = emit(0, 0);
  if (L > 1) alpha[1] = emit(0, 1);
  for (int64_t t = 1; t < Tb; ++t) {
    const double* prev = alpha.data() + (t - 1) * L;
    double* cur = alpha.data() + t * L;
    for (int64_t s = 0; s < L; ++s) {
      double a = prev[s];
      if (s >= 1) a = log_add(a, prev[s - 1]);
      if (skip(s)) a = log_add(a, prev[s - 2]);
      cur[s] = a == kNegInf ? kNegInf : a + emit(t, s);
    }
  }
  const double* last = alpha.data() + (Tb - 1) * L;
  const double logp = L > 1 ? log_add(last[L - 1], last[L - 2]) : last[0];
  if (!grad || logp == kNegInf) return -logp;

  std::vector<double> beta(size_t(Tb * L), kNegInf);
  beta[size_t((Tb - 1) * L + L - 1)] = 0;
  if (L > 1) beta[size_t((Tb - 1) * L + L - 2)] = 0;
  for (int64_t t = Tb - 2; t >= 0; --t) {
    const double* next = beta.data() + (t + 1) * L;
    double* cur = beta.data() + t * L;
    for (int64_t s = 0; s < L; ++s) {
      double v = next[s] + emit(t + 1, s);
      if (s + 1 < L) v = log_add(v, next[s + 1] + emit(t + 1, s + 1));
      if (s + 2 < L && skip(s + 2)) v = log_add(v, next[s + 2] + emit(t + 1, s + 2));
      cur[s] = v;
    }
  }
  for (int64_t t = 0; t < Tb; ++t)
    for (int64_t s = 0; s < L; ++s) {
      const double occupancy = alpha[size_t(t * L + s)] + beta[size_t(t * L + s)];
      if (occupancy != kNegInf) grad[t * p.C + label[size_t(s)]] -= T(std::exp(occupancy - logp));
    }
  return -logp;
}

}  // namespace

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, const CTCLossOptions& opt) {
  ENG_CHECK(log_probs.defined() && targets.defined(), "ctc_loss: undefined tensor argument");
  ENG_CHECK(is_floating(log_probs.dtype()) && log_probs.dim() == 3,
            "ctc_loss: log_probs must be f32 or f64 [B, T, C], got ", log_probs.dtype(), " ", log_probs.shape());
  const int64_t B = log_probs.size(0), T = log_probs.size(1), C = log_probs.size(2);
  ENG_CHECK(targets.dtype() == DType::I64 && targets.dim() == 2 && targets.size(0) == B,
            "ctc_loss: targets must be i64 [B, S] with B = ", B, " (log_probs ", log_probs.shape(), "), got ",
            targets.dtype(), " ", targets.shape());
  const int64_t S = targets.size(1);
  ENG_CHECK(opt.blank >= 0 && opt.blank < C, "ctc_loss: blank ", opt.blank, " out of range [0, ", C,
            ") for log_probs ", log_probs.shape());
  ENG_CHECK(int64_t(input_lengths.size()) == B && int64_t(target_lengths.size()) == B, "ctc_loss: ",
            input_lengths.size(), " input lengths and ", target_lengths.size(), " target lengths for a batch of ", B);
  Tensor tc = targets.contiguous();
  const int64_t* tg = tc.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t Tb = input_lengths[size_t(b)], Sb = target_lengths[size_t(b)];
    ENG_CHECK(Tb >= 0 && Tb <= T, "ctc_loss: input_lengths[", b, "] = ", Tb, " is outside [0, ", T,
              "] for log_probs ", log_probs.shape());
    ENG_CHECK(Sb >= 0 && Sb <= S, "ctc_loss: target_lengths[", b, "] = ", Sb, " is outside [0, ", S,
              "] for targets ", targets.shape());
    for (int64_t i = 0; i < Sb; ++i) {
      const int64_t k = tg[b * S + i];
      ENG_CHECK(k >= 0 && k < C && k != opt.blank, "ctc_loss: targets[", b, ", ", i, "] = ", k,
                " is not a label in [0, ", C, ") other than the blank ", opt.blank);
    }
  }

  Tensor lc = log_probs.contiguous();
  const bool want_grad = needs_grad({lc});
  Tensor grad = want_grad ? zeros(lc.shape(), lc.dtype()) : Tensor();
  std::vector<double> loss(static_cast<size_t>(B));
  const CTCShape shape{T, C, S, opt.blank, tg};
  ENG_DISPATCH(lc.dtype(), D, {
    const D* x = lc.data<D>();
    D* g = want_grad ? grad.data<D>() : nullptr;
    parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b)
        loss[size_t(b)] = ctc_sequence<D>(shape, b, input_lengths[size_t(b)], target_lengths[size_t(b)],
                                          x + b * T * C, g ? g + b * T * C : nullptr);
    });
  });
  for (double& l : loss)
    if (std::isinf(l) && opt.zero_infinity) l = 0;

  Tensor out;
  if (opt.reduction == CTCReduction::None) {
    out = from_vector(loss, {B}, lc.dtype());
  } else {
    double total = 0;  // summed serially: the result does not depend on the thread count
    for (double l : loss) total += l;
    out = scalar_tensor(opt.reduction == CTCReduction::Mean && B > 0 ? total / double(B) : total, lc.dtype());
  }
  return record(out, "ctc_loss", {lc}, [grad, B, T, C, reduction = opt.reduction](const Tensor& g) {
    // Per-sequence scale: the output gradient of its loss (and 1 / B for the mean).
    std::vector<double> scale(size_t(B), 0.0);
    for (int64_t b = 0; b < B; ++b)
      scale[size_t(b)] = reduction == CTCReduction::None ? g.at({b})
                         : reduction == CTCReduction::Mean ? g.item() / double(B)
                                                           : g.item();
    Tensor gx = empty(grad.shape(), grad.dtype());
    ENG_DISPATCH(grad.dtype(), D, {
      const D* src = grad.data<D>();
      D* dst = gx.data<D>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < T * C; ++i) dst[b * T * C + i] = D(scale[size_t(b)] * double(src[b * T * C + i]));
    });
    return std::vector<Tensor>{gx};
  });
}

}  // namespace eng
