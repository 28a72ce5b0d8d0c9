#include "ops/index.h"

#include <algorithm>
#include <string>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/strided.h"
#include "engine/threadpool.h"
#include "ops/cuda/dispatch.h"
#include "ops/kernel_util.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_OP("concat");
ENG_REGISTER_OP("index_select");
ENG_REGISTER_OP("index_add");
ENG_REGISTER_OP("gather");
ENG_REGISTER_OP("embedding");

namespace {

void check_index_dtype(const Tensor& index, const char* op, const char* name) {
  ENG_CHECK(index.defined(), op, ": undefined ", name);
  ENG_CHECK(index.dtype() == DType::I64, op, ": ", name, " must be i64, got ", index.dtype(), " ", index.shape());
}

void check_floating(const Tensor& x, const char* op, const char* name) {
  ENG_CHECK(x.defined(), op, ": undefined ", name);
  ENG_CHECK(is_floating(x.dtype()), op, ": ", name, " must be f32 or f64, got ", x.dtype(), " ", x.shape());
}

// Every index must lie in [0, n) before a kernel trusts it; `what` names the range's owner.
void check_indices(const Tensor& index, int64_t n, const char* op, const std::string& what) {
  require_cpu(index, op);
  const int64_t* p = static_cast<const int64_t*>(index.storage()->data);
  for_each_offset<1>(index.shape(), {index.strides().data()}, {index.offset()}, [&](auto o) {
    int64_t v = p[o[0]];
    ENG_CHECK(v >= 0 && v < n, op, ": index ", v, " out of range [0, ", n, ") for ", what);
  });
}

// Sizes before, at and after `axis`: a contiguous tensor seen as [outer, n, inner].
void split_at_axis(const Shape& s, int64_t axis, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < s.size(); ++d) inner *= s[d];
}

// out[o, i, :] = x[o, idx[i], :] for x [outer, n, inner] and out [outer, m, inner].
template <class T>
void select_rows(const T* x, T* out, const int64_t* idx, int64_t outer, int64_t n, int64_t m, int64_t inner) {
  parallel_for(0, outer * m, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t o = r / m, i = r % m;
      const T* src = x + (o * n + idx[i]) * inner;
      std::copy(src, src + inner, out + r * inner);
    }
  });
}

// gx[o, idx[i], :] += g[o, i, :]. Each task owns a block of columns, so repeated indices accumulate
// into the same row without races.
template <class T>
void scatter_add_rows(const T* g, T* gx, const int64_t* idx, int64_t outer, int64_t n, int64_t m, int64_t inner) {
  parallel_for(0, inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(outer * m, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < m; ++i) {
        const T* src = g + (o * m + i) * inner;
        T* dst = gx + (o * n + idx[i]) * inner;
        for (int64_t k = lo; k < hi; ++k) dst[k] += src[k];
      }
  });
}

// Walks every position of `index` with three offsets: into index, into the output (or its
// gradient), and into x with the axis stride zeroed (the axis coordinate is the index value).
// Rows of dim 0 run in parallel unless `serial`: a scatter along axis 0 can hit one x row from
// several index rows.
template <class F>
void for_each_gather(const Tensor& index, const Shape& ost, int64_t ooff, const Shape& xst, int64_t xoff, bool serial,
                     F f) {
  const Shape& shape = index.shape();
  const int64_t rows = shape[0], row_size = std::max<int64_t>(1, shape_numel(shape) / std::max<int64_t>(rows, 1));
  const Shape& ist = index.strides();
  parallel_for(0, rows, serial ? rows : std::max<int64_t>(1, 16384 / row_size), [&](int64_t lo, int64_t hi) {
    Shape sub = shape;
    sub[0] = hi - lo;
    for_each_offset<3>(sub, {ist.data(), ost.data(), xst.data()},
                       {index.offset() + lo * ist[0], ooff + lo * ost[0], xoff + lo * xst[0]}, f);
  });
}

}  // namespace

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  ENG_CHECK(!xs.empty(), "concat: no tensors to join");
  const Tensor& first = xs[0];
  ENG_CHECK(first.defined(), "concat: undefined tensor argument");
  const int64_t d = wrap_axis(axis, first.dim(), "concat");
  Shape shape = first.shape();
  shape[size_t(d)] = 0;
  for (const Tensor& x : xs) {
    check_same_dtype(first, x, "concat");
    ENG_CHECK(x.device() == first.device(), "concat: tensors on ", device_name(first.device()), " and ",
              device_name(x.device()));
    bool same = x.dim() == first.dim();
    for (int64_t k = 0; same && k < x.dim(); ++k)
      same = k == d || x.shape()[size_t(k)] == first.shape()[size_t(k)];
    ENG_CHECK(same, "concat: shapes ", first.shape(), " and ", x.shape(), " differ outside axis ", d);
    shape[size_t(d)] += x.shape()[size_t(d)];
  }
  Tensor out = empty_on(shape, first.dtype(), first.device());
  Shape sizes;
  int64_t start = 0;
  for (const Tensor& x : xs) {
    const int64_t len = x.shape()[size_t(d)];
    out.as_strided(x.shape(), out.strides(), start * out.strides()[size_t(d)]).copy_from(x);
    sizes.push_back(len);
    start += len;
  }
  return record(out, "concat", xs, [d, sizes](const Tensor& g) {
    std::vector<Tensor> grads;
    int64_t at = 0;
    for (int64_t len : sizes) {
      grads.push_back(narrow(g, d, at, len));
      at += len;
    }
    return grads;
  });
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t axis) {
  const int64_t d = wrap_axis(axis, x.dim(), "split");
  ENG_CHECK(size > 0, "split: size must be positive, got ", size);
  const int64_t n = x.shape()[size_t(d)];
  if (n == 0) return {x};
  std::vector<Tensor> pieces;
  for (int64_t start = 0; start < n; start += size) pieces.push_back(narrow(x, d, start, std::min(size, n - start)));
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis) {
  const int64_t d = wrap_axis(axis, x.dim(), "chunk");
  ENG_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  const int64_t n = x.shape()[size_t(d)];
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), d);
}

Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index) {
  check_floating(x, "index_select", "x");
  check_index_dtype(index, "index_select", "index");
  ENG_CHECK(index.dim() == 1, "index_select: index of shape ", index.shape(), " must be 1-D");
  const int64_t d = wrap_axis(axis, x.dim(), "index_select");
  const int64_t n = x.shape()[size_t(d)], m = index.numel();
  check_indices(index, n, "index_select", "axis " + std::to_string(d) + " of x of shape " + shape_str(x.shape()));
  Tensor xc = x.contiguous(), ic = index.contiguous();
  int64_t outer, inner;
  split_at_axis(x.shape(), d, outer, inner);
  Shape shape = x.shape();
  shape[size_t(d)] = m;
  Tensor out = empty(shape, x.dtype());
  ENG_DISPATCH(x.dtype(), T, select_rows(xc.data<T>(), out.data<T>(), ic.data<int64_t>(), outer, n, m, inner));
  auto backward = [in = x.shape(), dt = x.dtype(), ic, outer, n, m, inner](const Tensor& g) {
    Tensor gc = g.contiguous(), gx = zeros(in, dt);
    ENG_DISPATCH(dt, T, scatter_add_rows(gc.data<T>(), gx.data<T>(), ic.data<int64_t>(), outer, n, m, inner));
    return std::vector<Tensor>{gx, Tensor()};
  };
  return record(out, "index_select", {xc, index}, backward);
}

Tensor index_add(const Tensor& src, int64_t axis, const Tensor& index, int64_t n) {
  check_floating(src, "index_add", "src");
  check_index_dtype(index, "index_add", "index");
  const int64_t d = wrap_axis(axis, src.dim(), "index_add"), m = index.numel();
  ENG_CHECK(index.dim() == 1 && m == src.shape()[size_t(d)], "index_add: index of shape ", index.shape(),
            " must be 1-D with one entry per row of axis ", d, " of src of shape ", src.shape());
  ENG_CHECK(n >= 0, "index_add: output size ", n, " must be >= 0");
  check_indices(index, n, "index_add", "an output axis of size " + std::to_string(n));
  Tensor sc = src.contiguous(), ic = index.contiguous();
  int64_t outer, inner;
  split_at_axis(src.shape(), d, outer, inner);
  Shape shape = src.shape();
  shape[size_t(d)] = n;
  Tensor out = zeros(shape, src.dtype());
  ENG_DISPATCH(src.dtype(), T, scatter_add_rows(sc.data<T>(), out.data<T>(), ic.data<int64_t>(), outer, n, m, inner));
  return record(out, "index_add", {sc, index}, [d, ic](const Tensor& g) {
    return std::vector<Tensor>{index_select(g, d, ic), Tensor()};
  });
}

Tensor gather(const Tensor& x, int64_t axis, const Tensor& index) {
  check_floating(x, "gather", "x");
  check_index_dtype(index, "gather", "index");
  const int64_t d = wrap_axis(axis, x.dim(), "gather");
  ENG_CHECK(index.dim() == x.dim(), "gather: index of shape ", index.shape(), " must have the rank of x of shape ",
            x.shape());
  for (int64_t k = 0; k < x.dim(); ++k)
    ENG_CHECK(k == d || index.shape()[size_t(k)] <= x.shape()[size_t(k)], "gather: index of shape ", index.shape(),
              " is larger than x of shape ", x.shape(), " outside axis ", d);
  check_indices(index, x.shape()[size_t(d)], "gather",
                "axis " + std::to_string(d) + " of x of shape " + shape_str(x.shape()));
  require_cpu(x, "gather");
  Tensor out = empty(index.shape(), x.dtype());
  const int64_t* ip = static_cast<const int64_t*>(index.storage()->data);
  Shape xst = x.strides();
  const int64_t step = xst[size_t(d)];
  xst[size_t(d)] = 0;
  ENG_DISPATCH(x.dtype(), T, {
    const T* xp = static_cast<const T*>(x.storage()->data);
    T* o = out.data<T>();
    for_each_gather(index, out.strides(), 0, xst, x.offset(), false,
                    [&](auto off) { o[off[1]] = xp[off[2] + ip[off[0]] * step]; });
  });
  return record(out, "gather", {x, index}, [in = x.shape(), dt = x.dtype(), index, d](const Tensor& g) {
    Tensor gx = zeros(in, dt);
    Shape gst = gx.strides();
    const int64_t gstep = gst[size_t(d)];
    gst[size_t(d)] = 0;
    const int64_t* ip = static_cast<const int64_t*>(index.storage()->data);
    ENG_DISPATCH(dt, T, {
      const T* gp = static_cast<const T*>(g.storage()->data);
      T* gxp = gx.data<T>();
      for_each_gather(index, g.strides(), g.offset(), gst, 0, d == 0,
                      [&](auto off) { gxp[off[2] + ip[off[0]] * gstep] += gp[off[1]]; });
    });
    return std::vector<Tensor>{gx, Tensor()};
  });
}

Tensor one_hot(const Tensor& index, int64_t num_classes, DType dtype) {
  check_index_dtype(index, "one_hot", "index");
  ENG_CHECK(num_classes > 0, "one_hot: num_classes must be positive, got ", num_classes);
  check_indices(index, num_classes, "one_hot", std::to_string(num_classes) + " classes");
  Shape shape = index.shape();
  shape.push_back(num_classes);
  Tensor out = zeros(shape, dtype);
  const int64_t* ip = static_cast<const int64_t*>(index.storage()->data);
  ENG_DISPATCH_ALL(dtype, T, {
    T* o = out.data<T>();
    int64_t row = 0;
    for_each_offset<1>(index.shape(), {index.strides().data()}, {index.offset()},
                       [&](auto off) { o[row++ * num_classes + ip[off[0]]] = T(1); });
  });
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_floating(weight, "embedding", "weight");
  check_index_dtype(ids, "embedding", "ids");
  ENG_CHECK(weight.dim() == 2, "embedding: weight of shape ", weight.shape(), " must be 2-D [vocab, dim]");
  if (on_cuda(weight)) return cuda_op::embedding(weight, ids);
  const int64_t V = weight.shape()[0], D = weight.shape()[1], N = ids.numel();
  check_indices(ids, V, "embedding", "weight of shape " + shape_str(weight.shape()));
  Tensor wc = weight.contiguous(), ic = ids.contiguous();
  Shape shape = ids.shape();
  shape.push_back(D);
  Tensor out = empty(shape, weight.dtype());
  ENG_DISPATCH(weight.dtype(), T, select_rows(wc.data<T>(), out.data<T>(), ic.data<int64_t>(), 1, V, N, D));
  return record(out, "embedding", {wc, ids}, [V, D, N, dt = weight.dtype(), ic](const Tensor& g) {
    Tensor gc = g.contiguous(), gw = zeros({V, D}, dt);
    ENG_DISPATCH(dt, T, scatter_add_rows(gc.data<T>(), gw.data<T>(), ic.data<int64_t>(), 1, V, N, D));
    return std::vector<Tensor>{gw, Tensor()};
  });
}

}  // namespace eng
