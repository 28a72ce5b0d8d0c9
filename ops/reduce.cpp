#include "ops/reduce.h"

#include "engine/autograd.h"
#include "ops/reduce_kernel.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_OP("sum");

std::vector<int64_t> reduce_axes(const Tensor& a, const Shape& axes, const char* op) {
  std::vector<int64_t> r;
  if (axes.empty())
    for (int64_t d = 0; d < a.dim(); ++d) r.push_back(d);
  for (int64_t ax : axes) r.push_back(wrap_axis(ax, a.dim(), op));
  std::sort(r.begin(), r.end());
  ENG_CHECK(std::adjacent_find(r.begin(), r.end()) == r.end(), op, ": repeated axis in ", axes, " for shape ",
            a.shape());
  return r;
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdim) {
  Shape s;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    bool red = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!red)
      s.push_back(shape[size_t(d)]);
    else if (keepdim)
      s.push_back(1);
  }
  return s;
}

Tensor sum(const Tensor& a, const Shape& axes, bool keepdim) {
  auto ax = reduce_axes(a, axes, "sum");
  Tensor out = empty(reduced_shape(a.shape(), ax, keepdim), a.dtype());
  ENG_DISPATCH(a.dtype(), T, reduce_kernel<T, double>(
                                 a, ax, out.data<T>(), 0.0, [](double acc, T x) { return acc + double(x); },
                                 [](double acc, int64_t) { return acc; }));
  return record(out, "sum", {a}, [in = a.shape(), kept = reduced_shape(a.shape(), ax, true)](const Tensor& g) {
    return std::vector<Tensor>{expand(reshape(g, kept), in)};
  });
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  ENG_CHECK(a.dim() >= int64_t(shape.size()), "sum_to: cannot reduce shape ", a.shape(), " to ", shape);
  Shape axes;
  size_t lead = size_t(a.dim()) - shape.size();
  for (size_t d = 0; d < size_t(a.dim()); ++d) {
    if (d < lead) {
      axes.push_back(int64_t(d));
    } else if (shape[d - lead] == 1 && a.shape()[d] != 1) {
      axes.push_back(int64_t(d));
    } else {
      ENG_CHECK(shape[d - lead] == a.shape()[d], "sum_to: cannot reduce shape ", a.shape(), " to ", shape);
    }
  }
  if (axes.empty()) return reshape(a, shape);
  return reshape(sum(a, axes, true), shape);
}

}  // namespace eng
