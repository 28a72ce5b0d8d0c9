#include "models/attention/row_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/error.h"

namespace eng {

void RowCache::append(const Tensor& x, const std::string& who) {
  ENG_CHECK(x.dim() == 4 && x.size(2) == 1, who, ": a cached row must be [B, G, 1, F], got ", x.shape());
  if (buf_.defined())
    ENG_CHECK(x.size(0) == buf_.size(0) && x.size(1) == buf_.size(1) && x.size(3) == buf_.size(3) &&
                  x.dtype() == buf_.dtype(),
              who, ": the new row ", x.shape(), " (", dtype_name(x.dtype()), ") does not match the state's rows [",
              buf_.size(0), ", ", buf_.size(1), ", ", stored_, ", ", buf_.size(3), "] (", dtype_name(buf_.dtype()),
              ")");
  const int64_t capacity = buf_.defined() ? buf_.size(2) : 0;
  if (stored_ == capacity) {
    Tensor grown = empty({x.size(0), x.size(1), std::max<int64_t>(16, 2 * capacity), x.size(3)}, x.dtype());
    if (stored_ > 0) {
      const Shape kept{x.size(0), x.size(1), stored_, x.size(3)};
      grown.as_strided(kept, grown.strides(), 0).copy_from(buf_.as_strided(kept, buf_.strides(), 0));
    }
    buf_ = grown;
  }
  buf_.as_strided(x.shape(), buf_.strides(), stored_ * buf_.strides()[2]).copy_from(x);
  ++stored_;
}

void RowCache::read(int64_t bg, int64_t j, double* out) const {
  const int64_t F = buf_.size(3), at = (bg * buf_.size(2) + j) * F;
  ENG_DISPATCH(buf_.dtype(), T, {
    const T* row = buf_.data<T>() + at;
    std::copy(row, row + F, out);
  });
}

const int64_t* RowCache::ids(int64_t bg, int64_t j) const {
  return buf_.data<int64_t>() + (bg * buf_.size(2) + j) * buf_.size(3);
}

double softmax_row(std::vector<double>& logits, const std::vector<double>& values, int64_t Dv, double* out) {
  std::fill(out, out + Dv, 0.0);
  double top = -std::numeric_limits<double>::infinity();
  for (double x : logits) top = std::max(top, x);
  if (top == -std::numeric_limits<double>::infinity()) return top;
  double total = 0;
  for (double& x : logits) total += (x = std::exp(x - top));
  for (size_t n = 0; n < logits.size(); ++n)
    for (int64_t d = 0; d < Dv; ++d) out[d] += logits[n] * values[n * size_t(Dv) + size_t(d)];
  for (int64_t d = 0; d < Dv; ++d) out[d] /= total;
  return top + std::log(total);
}

void check_step_length(const std::string& who, int64_t length, int64_t stored) {
  ENG_CHECK(length == stored, who, ": state.length is ", length, " but the state holds ", stored,
            " positions (advance length by one after each step)");
}

}  // namespace eng
