#include "engine/tensor.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/cuda.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "engine/skip_init.h"
#include "engine/strided.h"

namespace eng {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Storage::Storage(size_t n, Device d) : nbytes(n), device(d) {
  data = d == Device::CUDA ? cuda::allocate(n) : allocator::allocate(n);
}

Storage::Storage(const void* d, size_t n, std::shared_ptr<const void> k)
    : data(const_cast<void*>(d)), nbytes(n), keeper(std::move(k)), read_only(true) {}

Storage::~Storage() {
  if (read_only) return;  // a view: the keeper's reference goes with this storage
  if (device == Device::CUDA)
    cuda::release(data, nbytes);
  else
    allocator::release(data, nbytes);
}

void fail_not_floating(const char* where) {
  fail(where, ": i64 tensors hold indices; this needs a floating tensor (f32 or f64)");
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

int64_t wrap_axis(int64_t axis, int64_t ndim, const char* op) {
  int64_t a = axis < 0 ? axis + ndim : axis;
  ENG_CHECK(a >= 0 && a < ndim, op, ": axis ", axis, " out of range for a ", ndim, "-D tensor");
  return a;
}

int64_t Tensor::size(int64_t d) const { return shape()[size_t(wrap_axis(d, dim(), "size"))]; }

int64_t Tensor::numel() const { return shape_numel(shape()); }

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (size_t i = shape().size(); i-- > 0;) {
    if (shape()[i] != 1 && strides()[i] != expect) return false;
    expect *= shape()[i];
  }
  return true;
}

namespace {

template <class T>
constexpr DType dtype_of = std::is_same_v<T, float> ? DType::F32 : std::is_same_v<T, double> ? DType::F64 : DType::I64;

void check_host_readable(const Tensor& t, const char* accessor) {
  ENG_CHECK(t.device() == Device::CPU, accessor, ": tensor of shape ", t.shape(), " is on ", device_name(t.device()),
            "; CPU code cannot read it: copy it with to_device(t, Device::CPU)");
}

void check_writable(const Tensor& t, const char* op) {
  ENG_CHECK(!t.storage()->read_only, op, ": tensor of shape ", t.shape(), " views read-only memory (a mapped or ",
            "caller's checkpoint); clone() it for a copy that can be written");
}

void check_on_cuda(const Tensor& t, const char* accessor) {
  ENG_CHECK(t.device() == Device::CUDA, accessor, ": tensor of shape ", t.shape(), " is on ", device_name(t.device()),
            ", not cuda: use data() for host memory");
}

}  // namespace

template <class T>
T* Tensor::data() const {
  ENG_CHECK(dtype() == dtype_of<T>, "data<", dtype_name(dtype_of<T>), ">: tensor holds ", dtype_name(dtype()));
  check_host_readable(*this, "data");
  return static_cast<T*>(impl_->storage->data) + impl_->offset;
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;

void* Tensor::raw_data() const {
  check_host_readable(*this, "raw_data");
  return static_cast<char*>(impl_->storage->data) + impl_->offset * int64_t(dtype_size(dtype()));
}

template <class T>
T* Tensor::device_data() const {
  ENG_CHECK(dtype() == dtype_of<T>, "device_data<", dtype_name(dtype_of<T>), ">: tensor holds ", dtype_name(dtype()));
  check_on_cuda(*this, "device_data");
  return static_cast<T*>(impl_->storage->data) + impl_->offset;
}
template float* Tensor::device_data<float>() const;
template double* Tensor::device_data<double>() const;
template int64_t* Tensor::device_data<int64_t>() const;

void* Tensor::raw_device_data() const {
  check_on_cuda(*this, "raw_device_data");
  return static_cast<char*>(impl_->storage->data) + impl_->offset * int64_t(dtype_size(dtype()));
}

Tensor& Tensor::set_requires_grad(bool on) {
  ENG_CHECK(!on || is_floating(dtype()), "set_requires_grad: an i64 tensor of shape ", shape(), " cannot require grad");
  if (on) check_writable(*this, "set_requires_grad");
  ENG_CHECK(is_leaf() || on, "set_requires_grad: cannot turn off gradients of a non-leaf tensor; use detach()");
  impl_->requires_grad = on;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined())
    ENG_CHECK(g.shape() == shape(), "set_grad: gradient shape ", g.shape(), " != tensor shape ", shape());
  impl_->grad = g.impl_;
}

Tensor Tensor::detach() const {
  auto t = std::make_shared<TensorImpl>(*impl_);
  t->requires_grad = false;
  t->grad.reset();
  t->grad_fn.reset();
  return Tensor(t);
}

void Tensor::backward() const {
  ENG_CHECK(numel() == 1, "backward: implicit gradient needs a one-element tensor, got shape ", shape(),
            "; pass the output gradient explicitly");
  backward(to_device(full(shape(), 1.0, dtype()), device()));
}

void Tensor::backward(const Tensor& grad_output, bool retain_graph) const {
  run_backward(*this, grad_output, retain_graph);
}

namespace {

int64_t flat_offset(const Tensor& t, std::initializer_list<int64_t> index, const char* op) {
  ENG_CHECK(int64_t(index.size()) == t.dim(), op, ": ", index.size(), " indices for a tensor of shape ", t.shape());
  int64_t off = t.offset(), d = 0;
  for (int64_t i : index) {
    ENG_CHECK(i >= 0 && i < t.shape()[size_t(d)], op, ": index ", i, " out of range for dim ", d, " of shape ",
              t.shape());
    off += i * t.strides()[size_t(d++)];
  }
  return off;
}

// The element at storage offset `off`, wherever the storage lives (one small copy from a device).
double read_element(const Tensor& t, int64_t off) {
  double v = 0;
  ENG_DISPATCH_ALL(t.dtype(), T, {
    const T* p = static_cast<const T*>(t.storage()->data) + off;
    T x{};
    if (t.device() == Device::CUDA)
      cuda::copy_device_to_host(&x, p, sizeof(T));
    else
      x = *p;
    v = double(x);
  });
  return v;
}

void write_element(const Tensor& t, int64_t off, double v) {
  ENG_DISPATCH_ALL(t.dtype(), T, {
    T* p = static_cast<T*>(t.storage()->data) + off;
    const T x = T(v);
    if (t.device() == Device::CUDA)
      cuda::copy_host_to_device(p, &x, sizeof(T));
    else
      *p = x;
  });
}

// Between two CUDA tensors of one dtype: a plain copy when both are contiguous, else the strided copy kernel
// (gather, scatter or both).
void copy_on_device(const Tensor& dst, const Tensor& src) {
  ENG_CHECK(src.dtype() == dst.dtype(), "copy_from: a copy between cuda tensors needs one dtype, got ", src.dtype(),
            " -> ", dst.dtype(), " of shape ", src.shape(), "; conversion runs on the CPU");
  if (dst.is_contiguous() && src.is_contiguous()) {
    if (src.raw_device_data() != dst.raw_device_data())
      cuda::copy_device_to_device(dst.raw_device_data(), src.raw_device_data(),
                                  size_t(dst.numel()) * dtype_size(dst.dtype()));
    return;
  }
  ENG_CHECK(dst.storage() != src.storage(), "copy_from: strided copy between views of one cuda storage (shape ",
            dst.shape(), "); copy through a contiguous tensor");
  cuda::copy_strided(dst.raw_device_data(), dst.strides().data(), src.raw_device_data(), src.strides().data(),
                     dst.shape().data(), int(dst.dim()), dtype_size(dst.dtype()));
}

// Dtype conversions run on the host side; strides are gathered on whichever side holds them.
void copy_across_devices(const Tensor& dst, const Tensor& src) {
  if (dst.device() == Device::CPU) return dst.copy_from(to_device(src, Device::CPU));  // the host copy converts
  if (src.device() == Device::CUDA) return copy_on_device(dst, src);
  Tensor h = src;
  if (src.dtype() != dst.dtype()) {
    h = empty(dst.shape(), dst.dtype());
    h.copy_from(src);
  }
  copy_on_device(dst, to_device(h, Device::CUDA));
}
}  // namespace

double Tensor::item() const {
  ENG_CHECK(numel() == 1, "item: tensor of shape ", shape(), " has ", numel(), " elements, not 1");
  return read_element(*this, offset());
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  return read_element(*this, flat_offset(*this, index, "at"));
}

void Tensor::set_at(std::initializer_list<int64_t> index, double v) const {
  check_writable(*this, "set_at");
  write_element(*this, flat_offset(*this, index, "set_at"), v);
}

std::vector<double> Tensor::to_vector() const {
  if (device() == Device::CUDA) return to_device(*this, Device::CPU).to_vector();
  std::vector<double> out;
  out.reserve(size_t(numel()));
  ENG_DISPATCH_ALL(dtype(), T, {
    const T* base = static_cast<const T*>(impl_->storage->data);
    for_each_offset<1>(shape(), {strides().data()}, {offset()}, [&](auto o) { out.push_back(double(base[o[0]])); });
  });
  return out;
}

void Tensor::copy_from(const Tensor& src) const {
  ENG_CHECK(src.shape() == shape(), "copy_from: source shape ", src.shape(), " != destination shape ", shape());
  check_writable(*this, "copy_from");
  if (device() == Device::CUDA || src.device() == Device::CUDA) return copy_across_devices(*this, src);
  ENG_DISPATCH_ALL(dtype(), D, ENG_DISPATCH_ALL(src.dtype(), S, {
    D* dst = static_cast<D*>(impl_->storage->data);
    const S* s = static_cast<const S*>(src.impl()->storage->data);
    for_each_offset<2>(shape(), {strides().data(), src.strides().data()}, {offset(), src.offset()},
                       [&](auto o) { dst[o[0]] = D(s[o[1]]); });
  }));
}

void Tensor::fill(double v) const {
  check_writable(*this, "fill");
  if (device() == Device::CUDA) {
    // fill is for initialisation: one host buffer and one copy serve any value and strides without a kernel
    if (v == 0 && !std::signbit(v) && is_contiguous())
      cuda::memset_zero(raw_device_data(), size_t(numel()) * dtype_size(dtype()));
    else
      copy_from(full(shape(), v, dtype()));
    return;
  }
  ENG_DISPATCH_ALL(dtype(), T, {
    T* base = static_cast<T*>(impl_->storage->data);
    const T tv = T(v);
    for_each_offset<1>(shape(), {strides().data()}, {offset()}, [&](auto o) { base[o[0]] = tv; });
  });
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

ENG_REGISTER_OP("clone");
ENG_REGISTER_OP("to_dtype");

Tensor Tensor::clone() const {
  Tensor t = empty_on(shape(), dtype(), device());
  t.copy_from(*this);
  return record(t, "clone", {*this}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  ENG_CHECK(device() == Device::CPU, "to(", dtype_name(t), "): dtype conversion runs on the CPU; this tensor of shape ",
            shape(), " is on ", device_name(device()));
  Tensor r = empty(shape(), t);
  r.copy_from(*this);
  return record(r, "to_dtype", {*this}, [from = dtype()](const Tensor& g) { return std::vector<Tensor>{g.to(from)}; });
}

Tensor Tensor::as_strided(const Shape& shp, const Shape& st, int64_t off) const {
  ENG_CHECK(shp.size() == st.size(), "as_strided: shape ", shp, " and strides ", st, " differ in rank");
  int64_t lo = off, hi = off;
  bool empty_view = false;
  for (size_t i = 0; i < shp.size(); ++i) {
    ENG_CHECK(shp[i] >= 0, "as_strided: negative size in shape ", shp);
    if (shp[i] == 0) empty_view = true;
    int64_t span = (shp[i] - 1) * st[i];
    (span < 0 ? lo : hi) += span;
  }
  int64_t cap = int64_t(impl_->storage->nbytes / dtype_size(dtype()));
  ENG_CHECK(empty_view || (lo >= 0 && hi < cap), "as_strided: view shape ", shp, " strides ", st, " offset ", off,
            " reaches outside a storage of ", cap, " elements");
  auto t = std::make_shared<TensorImpl>();
  t->storage = impl_->storage;
  t->shape = shp;
  t->strides = st;
  t->offset = off;
  t->dtype = dtype();
  return Tensor(t);
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::string s = str_cat("Tensor(shape=", shape(), ", dtype=", dtype());
  if (device() != Device::CPU) s += str_cat(", device=", device_name(device()));
  if (numel() <= 64) {
    s += ", values=[";
    auto v = to_vector();
    for (size_t i = 0; i < v.size(); ++i) s += str_cat(i ? ", " : "", v[i]);
    s += "]";
  }
  return s + ")";
}

Tensor empty(const Shape& shape, DType dtype) { return empty_on(shape, dtype, Device::CPU); }

Tensor empty_on(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) ENG_CHECK(s >= 0, "empty: negative size in shape ", shape);
  auto t = std::make_shared<TensorImpl>();
  t->storage = std::make_shared<Storage>(size_t(shape_numel(shape)) * dtype_size(dtype), device);
  t->shape = shape;
  t->strides = contiguous_strides(shape);
  t->dtype = dtype;
  return Tensor(t);
}

Tensor view_memory(const void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> keeper) {
  for (int64_t s : shape) ENG_CHECK(s >= 0, "view_memory: negative size in shape ", shape);
  ENG_CHECK(reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) == 0, "view_memory: address ", data,
            " is not aligned to the ", dtype_size(dtype), "-byte elements of ", dtype_name(dtype));
  auto t = std::make_shared<TensorImpl>();
  t->storage = std::make_shared<Storage>(data, size_t(shape_numel(shape)) * dtype_size(dtype), std::move(keeper));
  t->shape = shape;
  t->strides = contiguous_strides(shape);
  t->dtype = dtype;
  return Tensor(t);
}

Tensor zeros_on(const Shape& shape, DType dtype, Device device) {
  if (device == Device::CPU) return zeros(shape, dtype);
  Tensor t = empty_on(shape, dtype, device);
  t.fill(0);
  return t;
}

Tensor to_device(const Tensor& x, Device d) {
  if (x.device() == d) return x;
  const size_t nbytes = size_t(x.numel()) * dtype_size(x.dtype());
  if (d == Device::CUDA) {
    const Tensor src = x.detach().contiguous();
    Tensor out = empty_on(x.shape(), x.dtype(), Device::CUDA);
    cuda::copy_host_to_device(out.raw_device_data(), src.raw_data(), nbytes);
    return out;
  }
  // A strided view is gathered on the device first, so only its own elements come over.
  const Tensor src = x.is_contiguous() ? x : x.detach().clone();
  Tensor out = empty(x.shape(), x.dtype());
  cuda::copy_device_to_host(out.raw_data(), src.raw_device_data(), nbytes);
  return out;
}

Tensor full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  ENG_DISPATCH_ALL(dtype, T, {
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = T(value);
  });
  return t;
}

Tensor zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.raw_data(), 0, size_t(t.numel()) * dtype_size(dtype));
  return t;
}

Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype) {
  ENG_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
            " values do not fill shape ", shape);
  Tensor t = empty(shape, dtype);
  ENG_DISPATCH_ALL(dtype, T, {
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = T(values[i]);
  });
  return t;
}

Tensor from_vector(const std::vector<float>& values, const Shape& shape) {
  ENG_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
            " values do not fill shape ", shape);
  Tensor t = empty(shape, DType::F32);
  std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor arange(int64_t n, DType dtype) {
  Tensor t = empty({n}, dtype);
  ENG_DISPATCH_ALL(dtype, T, {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = T(i);
  });
  return t;
}

namespace {
thread_local bool t_skip_random_init = false;
}  // namespace

SkipRandomInitGuard::SkipRandomInitGuard() : prev_(t_skip_random_init) { t_skip_random_init = true; }
SkipRandomInitGuard::~SkipRandomInitGuard() { t_skip_random_init = prev_; }
bool skipping_random_init() { return t_skip_random_init; }

Tensor randn(const Shape& shape, Rng& rng, DType dtype) {
  Tensor t = empty(shape, dtype);
  if (t_skip_random_init) return t;
  ENG_DISPATCH(dtype, T, {
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = T(rng.normal());
  });
  return t;
}

Tensor rand(const Shape& shape, Rng& rng, DType dtype, double lo, double hi) {
  Tensor t = empty(shape, dtype);
  if (t_skip_random_init) return t;
  ENG_DISPATCH(dtype, T, {
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = T(lo + (hi - lo) * rng.uniform());
  });
  return t;
}

}  // namespace eng
