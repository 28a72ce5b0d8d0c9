// The edit distance behind the label error rate (ops/ctc_decode.h; train ctc reports it) against the
// recursive definition of the Levenshtein distance, on every pair of short sequences over a small alphabet.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "ops/ctc_decode.h"

using namespace eng;

namespace {

// lev(a, b): 0-length cases, else the cheapest of deleting a's first label, inserting b's, or matching the
// two (free when equal). Exponential, fine for lengths up to 4.
int64_t lev(const std::vector<int64_t>& a, size_t i, const std::vector<int64_t>& b, size_t j) {
  if (i == a.size()) return int64_t(b.size() - j);
  if (j == b.size()) return int64_t(a.size() - i);
  return std::min({lev(a, i + 1, b, j) + 1, lev(a, i, b, j + 1) + 1, lev(a, i + 1, b, j + 1) + (a[i] != b[j])});
}

// Every sequence of length 0..4 over labels {1, 2, 3}.
std::vector<std::vector<int64_t>> all_sequences() {
  std::vector<std::vector<int64_t>> out{{}};
  for (size_t k = 0; k < out.size(); ++k)
    if (out[k].size() < 4)
      for (int64_t v = 1; v <= 3; ++v) {
        out.push_back(out[k]);
        out.back().push_back(v);
      }
  return out;
}

}  // namespace

TEST_CASE("edit distance: equals the recursive definition on short sequences, symmetric, 0 only when equal") {
  const auto seqs = all_sequences();
  REQUIRE(seqs.size() == 121);  // 1 + 3 + 9 + 27 + 81
  for (size_t x = 0; x < seqs.size(); x += 2)
    for (size_t y = 0; y < seqs.size(); y += 3) {
      const int64_t d = edit_distance(seqs[x], seqs[y]);
      CHECK(d == lev(seqs[x], 0, seqs[y], 0));
      CHECK(d == edit_distance(seqs[y], seqs[x]));
      CHECK((d == 0) == (seqs[x] == seqs[y]));
    }
  // The label error rate sums edits and reference lengths over utterances (not a mean of per-utterance rates).
  CHECK(label_error_rate({{1, 2}, {3}}, {{1, 2, 3, 1}, {2}}) == doctest::Approx((2.0 + 1.0) / (4.0 + 1.0)));
}
