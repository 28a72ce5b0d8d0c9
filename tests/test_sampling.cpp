// Token sampling against its definition: the kept set and its probabilities computed here by hand (sorting,
// softmax, cutting), and the empirical frequencies of many draws against them.
#include "models/sampling.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "engine/error.h"

using namespace eng;

namespace {

std::vector<double> frequencies(const std::vector<float>& logits, const SamplingOptions& o, int draws) {
  Rng rng(3);
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) f[size_t(sample_token(logits.data(), int64_t(logits.size()), o, rng))] += 1;
  for (double& x : f) x /= draws;
  return f;
}

}  // namespace

TEST_CASE("sampling: temperature 0 and top_k 1 are the argmax; a seed reproduces the draws") {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  Rng rng(1);
  CHECK(sample_token(logits.data(), 5, {0.0, 0, 1.0}, rng) == 1);  // the lowest id among equal maxima
  CHECK(sample_token(logits.data(), 5, {1.0, 1, 1.0}, rng) == 1);
  CHECK(rng.position() == 1);  // greedy draws nothing; top_k 1 draws once
  Rng a(9), b(9);
  for (int i = 0; i < 50; ++i) CHECK(sample_token(logits.data(), 5, {1.0, 0, 1.0}, a) ==
                                     sample_token(logits.data(), 5, {1.0, 0, 1.0}, b));
}

TEST_CASE("sampling: frequencies follow softmax(logits / T) over the top-k, then the top-p nucleus") {
  const std::vector<float> logits{1.0f, 0.0f, 2.0f, -1.0f};
  const double e[] = {std::exp(1.0 / 2), std::exp(0.0), std::exp(2.0 / 2), std::exp(-1.0 / 2)};
  const double z = e[0] + e[1] + e[2] + e[3];
  std::vector<double> f = frequencies(logits, {2.0, 0, 1.0}, 40000);
  for (int i = 0; i < 4; ++i) CHECK(f[size_t(i)] == doctest::Approx(e[i] / z).epsilon(0.03));
  f = frequencies(logits, {2.0, 2, 1.0}, 40000);  // ids 2 and 0 only
  CHECK(f[1] == 0);
  CHECK(f[3] == 0);
  CHECK(f[2] == doctest::Approx(e[2] / (e[2] + e[0])).epsilon(0.03));
  // Sorted probabilities at T = 2: 0.455 (id 2), 0.276 (0), 0.167 (1), 0.101 (3); top_p 0.7 keeps ids 2 and 0
  // (0.731 >= 0.7), top_p 0.4 keeps id 2 alone.
  f = frequencies(logits, {2.0, 0, 0.7}, 40000);
  CHECK(f[1] == 0);
  CHECK(f[3] == 0);
  CHECK(f[0] == doctest::Approx(e[0] / (e[2] + e[0])).epsilon(0.03));
  f = frequencies(logits, {2.0, 0, 0.4}, 1000);
  CHECK(f[2] == 1);
}

TEST_CASE("sampling: bad options and NaN logits are refused") {
  const std::vector<float> logits{0.0f, NAN};
  Rng rng(1);
  CHECK_THROWS_WITH(sample_token(logits.data(), 2, {1.0, 0, 1.0}, rng), "sample_token: logit 1 is NaN");
  CHECK_THROWS_WITH(sample_token(logits.data(), 1, {-1.0, 0, 1.0}, rng),
                    "sample_token: temperature -1, top_k 0, top_p 1 out of range (>= 0, >= 0, (0, 1])");
  CHECK_THROWS_WITH(sample_token(logits.data(), 1, {1.0, 0, 0.0}, rng),
                    "sample_token: temperature 1, top_k 0, top_p 0 out of range (>= 0, >= 0, (0, 1])");
}
