#include "ops/dmol.h"

#include <cmath>
#include <vector>

#include "engine/error.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/reduce.h"
#include "ops/select.h"
#include "ops/softmax.h"
#include "ops/unary.h"
#include "ops/view.h"

namespace eng {
namespace {

// K, after checking params [..., 3K] against values [...] (and n).
int64_t mixture_size(const Tensor& params, const Tensor& values, int64_t levels, const char* op) {
  ENG_CHECK(levels >= 2, op, ": levels must be >= 2, got ", levels);
  ENG_CHECK(params.dim() >= 1 && params.size(-1) >= 3 && params.size(-1) % 3 == 0, op, ": params of shape ",
            params.shape(), " must end in 3K (logits, means, log scales of K components)");
  const Shape rows(params.shape().begin(), params.shape().end() - 1);
  if (values.defined()) {
    ENG_CHECK(values.dtype() == DType::I64, op, ": values must be i64, got ", values.dtype(), " ", values.shape());
    ENG_CHECK(values.shape() == rows, op, ": values of shape ", values.shape(), " do not match params of shape ",
              params.shape(), " without its last dim");
  }
  return params.size(-1) / 3;
}

// An i64 mask of t's shape (no gradient), 1 where pred(element) holds.
template <class Pred>
Tensor mask_where(const Tensor& t, Pred pred) {
  const Tensor c = t.detach().to(DType::F64).contiguous();
  Tensor m = empty(c.shape(), DType::I64);
  for (int64_t i = 0; i < c.numel(); ++i) m.data<int64_t>()[i] = pred(c.data<double>()[i]) ? 1 : 0;
  return m;
}

}  // namespace

Tensor dmol_log_prob(const Tensor& params, const Tensor& values, int64_t levels) {
  const int64_t K = mixture_size(params, values, levels, "dmol_log_prob");
  const Tensor vc = values.contiguous();
  const int64_t* v = vc.data<int64_t>();
  for (int64_t i = 0; i < vc.numel(); ++i)
    ENG_CHECK(v[i] >= 0 && v[i] < levels, "dmol_log_prob: value ", v[i], " out of range [0, ", levels, ")");
  const Tensor logits = narrow(params, -1, 0, K), means = narrow(params, -1, K, K);
  const Tensor log_scales = clamp(narrow(params, -1, 2 * K, K), -7.0, INFINITY);
  const double half = 1.0 / double(levels - 1);  // half a bin in x
  const Tensor level = unsqueeze(vc.to(params.dtype()), -1);
  const Tensor x = add_scalar(mul_scalar(level, 2 * half), -1.0);  // [..., 1], broadcast over the K components
  const Tensor inv_s = exp(neg(log_scales));
  const Tensor centered = sub(x, means);
  const Tensor plus_in = mul(inv_s, add_scalar(centered, half)), min_in = mul(inv_s, add_scalar(centered, -half));
  const Tensor log_cdf_plus = sub(plus_in, softplus(plus_in));  // log sigma: the first bin's mass
  const Tensor log_one_minus_cdf_min = neg(softplus(min_in));   // log (1 - sigma): the last bin's
  const Tensor cdf_delta = sub(sigmoid(plus_in), sigmoid(min_in));
  const Tensor mid_in = mul(inv_s, centered);
  // log of the logistic density at x, times the bin width 2 half
  const Tensor log_mid = add_scalar(sub(sub(mid_in, log_scales), mul_scalar(softplus(mid_in), 2.0)),
                                    std::log(2 * half));
  const Tensor inner = where(mask_where(cdf_delta, [](double d) { return d > 1e-5; }),
                             log(clamp(cdf_delta, 1e-12, INFINITY)), log_mid);
  const Tensor first = mask_where(level, [](double l) { return l == 0; });
  const Tensor last = mask_where(level, [levels](double l) { return l == double(levels - 1); });
  const Tensor log_bin = where(first, log_cdf_plus, where(last, log_one_minus_cdf_min, inner));
  const Tensor a = add(log_bin, log_softmax(logits, -1));
  const Tensor m = max(a, {-1}, true).detach();  // the log-sum-exp's shift: any constant gives the same value
  return squeeze(add(log(sum(exp(sub(a, m)), {-1}, true)), m), -1);
}

Tensor dmol_sample(const Tensor& params, int64_t levels, Rng& rng) {
  const int64_t K = mixture_size(params, Tensor(), levels, "dmol_sample");
  ENG_CHECK(params.dim() == 2, "dmol_sample: params must be [N, 3K], got ", params.shape());
  const Tensor p = params.detach().to(DType::F64).contiguous();
  const int64_t N = p.size(0);
  Tensor out = empty({N}, DType::I64);
  for (int64_t r = 0; r < N; ++r) {
    const double* row = p.data<double>() + r * 3 * K;
    double mx = row[0];
    for (int64_t k = 1; k < K; ++k) mx = std::fmax(mx, row[k]);
    std::vector<double> w(static_cast<size_t>(K));
    double total = 0;
    for (int64_t k = 0; k < K; ++k) total += w[size_t(k)] = std::exp(row[k] - mx);
    double u = rng.uniform() * total;
    int64_t k = 0;
    while (k < K - 1 && u >= w[size_t(k)]) u -= w[size_t(k++)];
    const double t = 1e-5 + (1 - 2e-5) * rng.uniform();  // away from 0 and 1: log(t / (1 - t)) stays finite
    const double scale = std::exp(std::fmax(row[2 * K + k], -7.0));
    const double x = std::fmin(1.0, std::fmax(-1.0, row[K + k] + scale * std::log(t / (1 - t))));
    out.data<int64_t>()[r] = std::llround((x + 1) / 2 * double(levels - 1));
  }
  return out;
}

}  // namespace eng
