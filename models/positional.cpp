#include "models/positional.h"

#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/skip_init.h"
#include "ops/binary.h"
#include "ops/view.h"

namespace eng {

PositionalKind parse_positional(const std::string& name) {
  if (name == "none") return PositionalKind::None;
  if (name == "sinusoidal") return PositionalKind::Sinusoidal;
  if (name == "learned") return PositionalKind::Learned;
  if (name == "rotary") return PositionalKind::Rotary;
  if (name == "alibi") return PositionalKind::Alibi;
  if (name == "relative") return PositionalKind::Relative;
  fail("positional encoding: expected none, sinusoidal, learned, rotary, alibi or relative, got '", name, "'");
}

const char* positional_name(PositionalKind k) {
  switch (k) {
    case PositionalKind::Sinusoidal: return "sinusoidal";
    case PositionalKind::Learned: return "learned";
    case PositionalKind::Rotary: return "rotary";
    case PositionalKind::Alibi: return "alibi";
    case PositionalKind::Relative: return "relative";
    default: return "none";
  }
}

bool positional_is_absolute(PositionalKind k) {
  return k == PositionalKind::Sinusoidal || k == PositionalKind::Learned;
}

Tensor sinusoidal_table(int64_t length, int64_t dim, int64_t offset, DType dtype) {
  Tensor t = empty({length, dim}, DType::F64);
  double* p = t.data<double>();
  for (int64_t pos = 0; pos < length; ++pos)
    for (int64_t i = 0; i < dim; ++i)
      p[pos * dim + i] = sinusoidal_entry(pos + offset, i, sinusoidal_frequency(i, dim));
  return t.to(dtype);
}

double sinusoidal_frequency(int64_t i, int64_t dim) { return std::pow(10000.0, -double(i - i % 2) / double(dim)); }

LearnedPositional::LearnedPositional(int64_t max_len, int64_t dim, Rng& rng) {
  ENG_CHECK(max_len > 0 && dim > 0, "LearnedPositional: sizes must be positive, got ", max_len, " x ", dim);
  NoGradGuard no_grad;
  const Tensor drawn = randn({max_len, dim}, rng);  // not scaled under SkipRandomInitGuard (models/embedding.cpp)
  weight = register_parameter("weight", skipping_random_init() ? drawn : mul_scalar(drawn, 0.02));
}

Tensor LearnedPositional::forward(int64_t length, int64_t offset) const {
  ENG_CHECK(offset >= 0 && offset + length <= weight.size(0), "learned positional encoding: positions ", offset,
            "..", offset + length - 1, " exceed max_len ", weight.size(0));
  return narrow(weight, 0, offset, length);
}

Tensor alibi_slopes(int64_t heads) {
  ENG_CHECK(heads >= 1, "alibi_slopes: heads must be >= 1, got ", heads);
  auto pow2_slopes = [](int64_t n) {
    std::vector<double> s;
    double start = std::pow(2.0, -8.0 / double(n));
    for (int64_t i = 0; i < n; ++i) s.push_back(std::pow(start, double(i + 1)));
    return s;
  };
  int64_t n = 1;
  while (n * 2 <= heads) n *= 2;
  std::vector<double> s = pow2_slopes(n);
  if (n < heads) {
    std::vector<double> extra = pow2_slopes(2 * n);
    for (int64_t i = 0; int64_t(s.size()) < heads; i += 2) s.push_back(extra[size_t(i)]);
  }
  return from_vector(s, {heads});
}

}  // namespace eng
