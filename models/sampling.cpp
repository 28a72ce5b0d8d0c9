#include "models/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/error.h"

namespace eng {

int64_t sample_token(const float* logits, int64_t n, const SamplingOptions& o, Rng& rng) {
  ENG_CHECK(n >= 1, "sample_token: no logits");
  ENG_CHECK(o.temperature >= 0 && o.top_k >= 0 && o.top_p > 0 && o.top_p <= 1, "sample_token: temperature ",
            o.temperature, ", top_k ", o.top_k, ", top_p ", o.top_p, " out of range (>= 0, >= 0, (0, 1])");
  for (int64_t i = 0; i < n; ++i)
    ENG_CHECK(!std::isnan(logits[i]), "sample_token: logit ", i, " is NaN");
  if (o.temperature == 0) return int64_t(std::max_element(logits, logits + n) - logits);

  // Ids by decreasing logit (ties by id), cut to top_k.
  std::vector<int64_t> order(size_t(n), 0);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (o.top_k > 0 && o.top_k < n) order.resize(size_t(o.top_k));
  // Softmax in double over the kept ids, shifted by the largest logit.
  std::vector<double> p(order.size());
  const double top = logits[order[0]];
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) total += p[i] = std::exp((double(logits[order[i]]) - top) / o.temperature);
  // Nucleus: the shortest prefix whose mass reaches top_p (at least one token).
  size_t keep = order.size();
  if (o.top_p < 1) {
    double mass = 0;
    for (keep = 0; keep < order.size();) {
      mass += p[keep++] / total;
      if (mass >= o.top_p) break;
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[i];
  const double u = rng.uniform() * kept;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];  // u within rounding of the total
}

}  // namespace eng
