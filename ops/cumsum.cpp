#include "ops/cumsum.h"

#include <algorithm>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/strided.h"
#include "engine/threadpool.h"

namespace eng {

ENG_REGISTER_OP("cumsum");

namespace {

// Scans every line of `a` along `axis` into the contiguous `out`. Lines are independent, so they are
// spread over the pool; each accumulates in double so that long f32 scans do not drift.
template <class T>
void cumsum_kernel(const Tensor& a, int64_t axis, bool reverse, T* out) {
  const bool scalar = a.dim() == 0;
  Shape lines = a.shape();
  if (!scalar) lines[size_t(axis)] = 1;
  const Shape out_strides = contiguous_strides(a.shape());
  std::vector<int64_t> in_base, out_base;
  for_each_offset<2>(lines, {a.strides().data(), out_strides.data()}, {a.offset(), 0}, [&](auto o) {
    in_base.push_back(o[0]);
    out_base.push_back(o[1]);
  });
  const int64_t n = scalar ? 1 : a.shape()[size_t(axis)];
  const int64_t in_step = scalar ? 0 : a.strides()[size_t(axis)];
  const int64_t out_step = scalar ? 0 : out_strides[size_t(axis)];
  const T* x = static_cast<const T*>(a.storage()->data);
  parallel_for(0, int64_t(in_base.size()), std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t l = lo; l < hi; ++l) {
                   const T* src = x + in_base[size_t(l)];
                   T* dst = out + out_base[size_t(l)];
                   double acc = 0;
                   for (int64_t k = 0; k < n; ++k) {
                     int64_t i = reverse ? n - 1 - k : k;
                     acc += double(src[i * in_step]);
                     dst[i * out_step] = T(acc);
                   }
                 }
               });
}

}  // namespace

Tensor cumsum(const Tensor& a, int64_t axis, bool reverse) {
  int64_t ax = 0;
  if (a.dim() > 0)
    ax = wrap_axis(axis, a.dim(), "cumsum");
  else
    ENG_CHECK(axis == 0 || axis == -1, "cumsum: axis ", axis, " out of range for a 0-D tensor");
  Tensor out = empty(a.shape(), a.dtype());
  ENG_DISPATCH(a.dtype(), T, cumsum_kernel<T>(a, ax, reverse, out.data<T>()));
  // each a[j] feeds every out[i] with i >= j, so its gradient is the sum of g[i] over i >= j
  return record(out, "cumsum", {a}, [ax, reverse](const Tensor& g) {
    return std::vector<Tensor>{cumsum(g, ax, !reverse)};
  });
}

}  // namespace eng
