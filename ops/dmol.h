// The discretised mixture of logistics (Salimans et al. 2017, PixelCNN++ §2.1; the output distribution of
// Katharopoulos et al. 2020 §4.2.1) for values on n levels, e.g. 8-bit pixels. A value v is x = 2v/(n-1) - 1 in
// [-1, 1]; each of the K components is a logistic of mean mu_k and scale e^{l_k}, and the probability of v is the
// mixture of the logistic mass of its bin [x - 1/(n-1), x + 1/(n-1)], the first and last bins extended to -inf
// and +inf, so that the n probabilities sum to 1:
//   P(v) = sum_k pi_k [sigma((x + 1/(n-1) - mu_k) / s_k) - sigma((x - 1/(n-1) - mu_k) / s_k)],  pi = softmax(logits).
#pragma once
#include "engine/rng.h"
#include "engine/tensor.h"

namespace eng {

// log P(v) for params [..., 3K] (K logits, K means, K log scales, the last clamped at -7 below) and values [...]
// (i64 in [0, n)); f32 or f64, differentiable in params. Where a bin's mass falls below 1e-5 (a bin far in a
// component's tail, in f32) the density at x times the bin width stands in for it, as in PixelCNN++: the
// difference of two nearly equal sigmoids would be all rounding. Composed from differentiable ops.
Tensor dmol_log_prob(const Tensor& params, const Tensor& values, int64_t levels);

// One value per row of params [N, 3K]: a component drawn from pi, then a logistic sample x = mu + s log(u / (1 - u))
// clamped to [-1, 1] and rounded to the nearest of the n levels. Returns i64 [N].
Tensor dmol_sample(const Tensor& params, int64_t levels, Rng& rng);

}  // namespace eng
