#include "ops/ctc_decode.h"

#include <algorithm>
#include <numeric>

#include "engine/error.h"

namespace eng {

LabelSeqs ctc_greedy_decode(const Tensor& scores, const std::vector<int64_t>& input_lengths, int64_t blank) {
  ENG_CHECK(scores.defined() && is_floating(scores.dtype()) && scores.dim() == 3,
            "ctc_greedy_decode: scores must be f32 or f64 [B, T, C], got ",
            scores.defined() ? shape_str(scores.shape()) : "undefined");
  const int64_t B = scores.size(0), T = scores.size(1), C = scores.size(2);
  ENG_CHECK(int64_t(input_lengths.size()) == B, "ctc_greedy_decode: ", input_lengths.size(),
            " input lengths for scores ", scores.shape());
  ENG_CHECK(blank >= 0 && blank < C, "ctc_greedy_decode: blank ", blank, " out of range [0, ", C, ")");
  Tensor x = scores.detach().contiguous().to(DType::F64);
  const double* p = x.data<double>();
  LabelSeqs out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t Tb = input_lengths[size_t(b)];
    ENG_CHECK(Tb >= 0 && Tb <= T, "ctc_greedy_decode: input_lengths[", b, "] = ", Tb, " is outside [0, ", T, "]");
    int64_t prev = blank;
    for (int64_t t = 0; t < Tb; ++t) {
      const double* row = p + (b * T + t) * C;
      const int64_t k = std::max_element(row, row + C) - row;
      if (k != blank && k != prev) out[size_t(b)].push_back(k);
      prev = k;
    }
  }
  return out;
}

LabelSeqs unpad_labels(const Tensor& labels, const std::vector<int64_t>& lengths) {
  ENG_CHECK(labels.defined() && labels.dtype() == DType::I64 && labels.dim() == 2 &&
                labels.size(0) == int64_t(lengths.size()),
            "unpad_labels: labels must be i64 [B, S] with B = ", lengths.size(), " lengths, got ",
            labels.defined() ? shape_str(labels.shape()) : "undefined");
  Tensor c = labels.contiguous();
  const int64_t S = labels.size(1);
  LabelSeqs out;
  for (size_t b = 0; b < lengths.size(); ++b) {
    ENG_CHECK(lengths[b] >= 0 && lengths[b] <= S, "unpad_labels: lengths[", b, "] = ", lengths[b],
              " is outside [0, ", S, "]");
    const int64_t* row = c.data<int64_t>() + int64_t(b) * S;
    out.emplace_back(row, row + lengths[b]);
  }
  return out;
}

int64_t edit_distance(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  // One row of the dynamic programme at a time: d[j] = distance from a[0..i) to b[0..j).
  std::vector<int64_t> d(b.size() + 1);
  std::iota(d.begin(), d.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    int64_t diag = d[0];
    d[0] = int64_t(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int64_t up = d[j];
      d[j] = std::min({d[j] + 1, d[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return d[b.size()];
}

double label_error_rate(const LabelSeqs& hypotheses, const LabelSeqs& references) {
  ENG_CHECK(hypotheses.size() == references.size(), "label_error_rate: ", hypotheses.size(), " hypotheses for ",
            references.size(), " references");
  int64_t edits = 0, total = 0;
  for (size_t i = 0; i < references.size(); ++i) {
    edits += edit_distance(hypotheses[i], references[i]);
    total += int64_t(references[i].size());
  }
  ENG_CHECK(total > 0, "label_error_rate: the references hold no labels");
  return double(edits) / double(total);
}

}  // namespace eng
