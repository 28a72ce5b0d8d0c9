#include "ops/view.h"

#include <algorithm>

#include "engine/autograd.h"
#include "engine/error.h"
#include "ops/reduce.h"

namespace eng {

ENG_REGISTER_OP("reshape");
ENG_REGISTER_OP("permute");
ENG_REGISTER_OP("slice");
ENG_REGISTER_OP("expand");

namespace {

// Strides that let `a` be seen with `shape` without copying, or an empty Shape if impossible.
// Walks groups of dims of the old shape that map onto groups of the new one (as in NumPy).
Shape view_strides(const Tensor& a, const Shape& shape) {
  const Shape& os = a.shape();
  const Shape& ost = a.strides();
  Shape st(shape.size());
  if (a.numel() == 0 || a.is_contiguous()) return contiguous_strides(shape);
  size_t i = 0, j = 0;
  while (i < os.size() || j < shape.size()) {
    if (i < os.size() && os[i] == 1) { ++i; continue; }
    if (j < shape.size() && shape[j] == 1) { st[j++] = 1; continue; }
    // A group: old dims [i, i2) and new dims [j, j2) with equal products.
    size_t i2 = i + 1, j2 = j + 1;
    int64_t po = os[i], pn = shape[j];
    while (po != pn) {
      if (po < pn) po *= os[i2++]; else pn *= shape[j2++];
    }
    for (size_t k = i; k + 1 < i2; ++k)  // the old group must itself be contiguous
      if (os[k + 1] != 1 && ost[k] != ost[k + 1] * os[k + 1]) return {};
    int64_t s = ost[i2 - 1];
    for (size_t k = j2; k-- > j;) {
      st[k] = s;
      s *= shape[k];
    }
    i = i2;
    j = j2;
  }
  return st;
}

}  // namespace

Tensor reshape(const Tensor& a, Shape shape) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      ENG_CHECK(infer < 0, "reshape: more than one -1 in target shape ", shape);
      infer = int64_t(i);
    } else {
      ENG_CHECK(shape[i] >= 0, "reshape: negative size in target shape ", shape);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    ENG_CHECK(known > 0 && a.numel() % known == 0, "reshape: cannot infer -1 in ", shape, " for input ", a.shape());
    shape[size_t(infer)] = a.numel() / known;
  }
  ENG_CHECK(shape_numel(shape) == a.numel(), "reshape: input shape ", a.shape(), " (", a.numel(),
            " elements) does not fit target shape ", shape);
  Shape st = view_strides(a, shape);
  Tensor src = st.empty() && !shape.empty() ? a.contiguous() : a;
  if (st.empty() && !shape.empty()) st = contiguous_strides(shape);
  Tensor out = src.as_strided(shape, st, src.offset());
  return record(out, "reshape", {a},
                         [in = a.shape()](const Tensor& g) { return std::vector<Tensor>{reshape(g, in)}; });
}

Tensor flatten(const Tensor& a, int64_t start_axis, int64_t end_axis) {
  if (a.dim() == 0) return reshape(a, {1});
  int64_t s = wrap_axis(start_axis, a.dim(), "flatten"), e = wrap_axis(end_axis, a.dim(), "flatten");
  ENG_CHECK(s <= e, "flatten: start axis ", start_axis, " after end axis ", end_axis, " for shape ", a.shape());
  Shape shape(a.shape().begin(), a.shape().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= a.shape()[size_t(d)];
  shape.push_back(n);
  shape.insert(shape.end(), a.shape().begin() + e + 1, a.shape().end());
  return reshape(a, shape);
}

Tensor permute(const Tensor& a, const Shape& order) {
  ENG_CHECK(int64_t(order.size()) == a.dim(), "permute: order of length ", order.size(), " for shape ", a.shape());
  Shape shape(order.size()), st(order.size()), inverse(order.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t d = wrap_axis(order[i], a.dim(), "permute");
    ENG_CHECK(inverse[size_t(d)] < 0, "permute: axis ", d, " repeated in order ", order);
    inverse[size_t(d)] = int64_t(i);
    shape[i] = a.shape()[size_t(d)];
    st[i] = a.strides()[size_t(d)];
  }
  Tensor out = a.as_strided(shape, st, a.offset());
  return record(out, "permute", {a}, [inverse](const Tensor& g) {
    return std::vector<Tensor>{permute(g, inverse)};
  });
}

Tensor transpose(const Tensor& a, int64_t axis0, int64_t axis1) {
  int64_t d0 = wrap_axis(axis0, a.dim(), "transpose"), d1 = wrap_axis(axis1, a.dim(), "transpose");
  Shape order(size_t(a.dim()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  std::swap(order[size_t(d0)], order[size_t(d1)]);
  return permute(a, order);
}

Tensor narrow(const Tensor& a, int64_t axis, int64_t start, int64_t length) {
  ENG_CHECK(length >= 0, "narrow: negative length ", length);
  return slice(a, axis, start, start + length, 1);
}

Tensor slice(const Tensor& a, int64_t axis, int64_t start, int64_t end, int64_t step) {
  int64_t d = wrap_axis(axis, a.dim(), "slice");
  int64_t n = a.shape()[size_t(d)];
  ENG_CHECK(step >= 1, "slice: step must be >= 1, got ", step);
  ENG_CHECK(start >= 0 && start <= end && end <= n, "slice: range [", start, ", ", end, ") out of bounds for axis ",
            d, " of shape ", a.shape());
  Shape shape = a.shape(), st = a.strides();
  shape[size_t(d)] = (end - start + step - 1) / step;
  st[size_t(d)] *= step;
  Tensor out = a.as_strided(shape, st, a.offset() + start * a.strides()[size_t(d)]);
  return record(out, "slice", {a}, [in = a.shape(), dt = a.dtype(), d, start, end, step](const Tensor& g) {
    Tensor full_grad = zeros_on(in, dt, g.device());
    Shape st2 = full_grad.strides();
    Shape shp = in;
    shp[size_t(d)] = (end - start + step - 1) / step;
    st2[size_t(d)] *= step;
    full_grad.as_strided(shp, st2, start * full_grad.strides()[size_t(d)]).copy_from(g);
    return std::vector<Tensor>{full_grad};
  });
}

Tensor expand(const Tensor& a, const Shape& shape) {
  ENG_CHECK(shape.size() >= size_t(a.dim()), "expand: cannot expand shape ", a.shape(), " to fewer dims ", shape);
  Shape out_shape = shape, st(shape.size(), 0);
  size_t lead = shape.size() - size_t(a.dim());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      ENG_CHECK(shape[i] >= 0, "expand: size -1 not allowed for a new leading dim, shape ", shape);
      continue;
    }
    int64_t have = a.shape()[i - lead];
    if (shape[i] == -1) out_shape[i] = have;
    ENG_CHECK(out_shape[i] == have || have == 1, "expand: cannot expand shape ", a.shape(), " to ", shape);
    st[i] = out_shape[i] == have ? a.strides()[i - lead] : 0;
  }
  Tensor out = a.as_strided(out_shape, st, a.offset());
  return record(out, "expand", {a}, [in = a.shape()](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, in)};
  });
}

Tensor squeeze(const Tensor& a, int64_t axis) {
  int64_t d = wrap_axis(axis, a.dim(), "squeeze");
  ENG_CHECK(a.shape()[size_t(d)] == 1, "squeeze: axis ", axis, " has size ", a.shape()[size_t(d)], " in shape ",
            a.shape());
  Shape shape = a.shape();
  shape.erase(shape.begin() + d);
  return reshape(a, shape);
}

Tensor unsqueeze(const Tensor& a, int64_t axis) {
  int64_t d = wrap_axis(axis, a.dim() + 1, "unsqueeze");
  Shape shape = a.shape();
  shape.insert(shape.begin() + d, 1);
  return reshape(a, shape);
}

Tensor repeat_heads(const Tensor& a, int64_t heads) {
  ENG_CHECK(a.dim() == 4 && a.size(1) >= 1 && heads % a.size(1) == 0, "repeat_heads: input must be [B, G, L, D] "
            "with G dividing ", heads, ", got ", a.shape());
  const int64_t G = a.size(1);
  if (G == heads) return a;
  Tensor e = expand(unsqueeze(a, 2), {a.size(0), G, heads / G, a.size(2), a.size(3)});
  return reshape(e, {a.size(0), heads, a.size(2), a.size(3)});
}

}  // namespace eng
