#include "ops/kernel_util.h"

namespace eng {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape s(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    ENG_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b, " cannot be broadcast together");
    s[i] = da == 1 ? db : da;
  }
  return s;
}

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape st(shape.size(), 0);
  size_t lead = shape.size() - size_t(t.dim());
  for (size_t i = 0; i < size_t(t.dim()); ++i)
    st[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return st;
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  ENG_CHECK(a.defined() && b.defined(), op, ": undefined tensor argument");
  ENG_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ (", dtype_name(a.dtype()), " ", a.shape(), " vs ",
            dtype_name(b.dtype()), " ", b.shape(), ")");
}

}  // namespace eng
