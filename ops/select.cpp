#include "ops/select.h"

#include "engine/autograd.h"
#include "ops/kernel_util.h"
#include "ops/reduce.h"

namespace eng {

ENG_REGISTER_OP("masked_fill");
ENG_REGISTER_OP("where");

namespace {

// The condition as a constant of the values' dtype, so one kernel type serves both operands.
Tensor condition_as(const Tensor& cond, DType dt, const char* op, const char* name) {
  ENG_CHECK(cond.defined(), op, ": undefined ", name);
  ENG_CHECK(cond.dtype() == DType::I64 || cond.dtype() == dt, op, ": ", name, " must be i64 or ", dt, ", got ",
            cond.dtype(), " ", cond.shape());
  return cond.detach().to(dt);
}

// Whether `from` broadcasts to `to` without growing `to` (NumPy rules).
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

// g where keep(c), else 0, with c broadcast to g's shape.
template <class Keep>
Tensor pass_where(const Tensor& g, const Tensor& c, Keep keep) {
  return map_binary(g, c, "where", [keep](auto gv, auto cv) { return keep(cv != 0) ? gv : decltype(gv)(0); });
}

}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  ENG_CHECK(x.defined(), "masked_fill: undefined x");
  ENG_CHECK(is_floating(x.dtype()), "masked_fill: x must be f32 or f64, got ", x.dtype(), " ", x.shape());
  Tensor m = condition_as(mask, x.dtype(), "masked_fill", "mask");
  ENG_CHECK(broadcasts_to(m.shape(), x.shape()), "masked_fill: mask of shape ", m.shape(),
            " cannot be broadcast to x of shape ", x.shape());
  Tensor out = map_binary(x, m, "masked_fill",
                          [value](auto xv, auto mv) { return mv != 0 ? decltype(xv)(value) : xv; });
  return record(out, "masked_fill", {x, mask}, [m](const Tensor& g) {
    return std::vector<Tensor>{pass_where(g, m, [](bool set) { return !set; }), Tensor()};
  });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same_dtype(a, b, "where");
  for (const Tensor& t : {cond, a, b}) require_cpu(t, "where");
  ENG_CHECK(is_floating(a.dtype()), "where: a and b must be f32 or f64, got ", a.dtype(), " ", a.shape());
  Tensor c = condition_as(cond, a.dtype(), "where", "cond");
  const Shape shape = broadcast_shapes(broadcast_shapes(c.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(shape, a.dtype());
  ENG_DISPATCH(a.dtype(), T, {
    T* o = out.data<T>();
    const T* pc = static_cast<const T*>(c.storage()->data);
    const T* pa = static_cast<const T*>(a.storage()->data);
    const T* pb = static_cast<const T*>(b.storage()->data);
    if (c.shape() == shape && a.shape() == shape && b.shape() == shape && c.is_contiguous() && a.is_contiguous() &&
        b.is_contiguous()) {
      const T *x = pc + c.offset(), *y = pa + a.offset(), *z = pb + b.offset();
      parallel_for(0, out.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) o[i] = x[i] != 0 ? y[i] : z[i];
      });
    } else {
      Shape sc = broadcast_strides(c, shape), sa = broadcast_strides(a, shape), sb = broadcast_strides(b, shape);
      int64_t i = 0;
      for_each_offset<3>(shape, {sc.data(), sa.data(), sb.data()}, {c.offset(), a.offset(), b.offset()},
                         [&](auto off) { o[i++] = pc[off[0]] != 0 ? pa[off[1]] : pb[off[2]]; });
    }
  });
  return record(out, "where", {cond, a, b}, [c, sa = a.shape(), sb = b.shape()](const Tensor& g) {
    Tensor ga = pass_where(g, c, [](bool take_a) { return take_a; });
    Tensor gb = pass_where(g, c, [](bool take_a) { return !take_a; });
    return std::vector<Tensor>{Tensor(), sum_to(ga, sa), sum_to(gb, sb)};
  });
}

}  // namespace eng
