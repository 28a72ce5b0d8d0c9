// Tensor: a cheap handle (shared pointer) to shape, strides, offset and a shared storage, plus the
// autograd fields. Copying a Tensor copies the handle, never the data. Views (as_strided) share
// storage; the differentiable views (reshape, permute, narrow, expand, ...) live in ops/view.h.
#pragma once
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/dtype.h"

namespace eng {

class Rng;
struct Node;

// A block of raw memory: from the caching allocator, or a view of CPU memory this storage does not own (a mapped
// file, a caller's buffer: engine/safetensors.h's map_safetensors and view_safetensors), which `keeper` keeps alive
// for as long as any tensor views it and which is never released through the allocator. A view is read-only:
// copy_from, fill, set_at and set_requires_grad(true) refuse it, and a mapped file's pages fault on a raw write.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device = Device::CPU;
  std::shared_ptr<const void> keeper;  // set for a view only
  bool read_only = false;
  Storage(size_t nbytes, Device device);
  // A read-only view of `nbytes` at `data`; `keeper` may be null when the caller guarantees the memory outlives
  // every tensor of this storage (e.g. weights linked into the binary).
  Storage(const void* data, size_t nbytes, std::shared_ptr<const void> keeper);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::F32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;     // the op that produced this tensor (null for leaves)
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  const Shape& strides() const { return impl_->strides; }
  int64_t offset() const { return impl_->offset; }
  int64_t dim() const { return int64_t(impl_->shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& shared_impl() const { return impl_; }

  // Pointer to the first element (at offset). T must match dtype(). CPU tensors only: on a CUDA
  // tensor these throw instead of handing host code a device address.
  template <class T>
  T* data() const;
  void* raw_data() const;
  // The same for a CUDA tensor (a device address, for the kernels of ops/cuda/kernels.h); throws on a
  // CPU tensor.
  template <class T>
  T* device_data() const;
  void* raw_device_data() const;

  // Autograd. See engine/autograd.h for the rules.
  bool requires_grad() const { return impl_->requires_grad; }
  Tensor& set_requires_grad(bool on = true);
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  Tensor grad() const { return Tensor(impl_->grad); }
  void set_grad(const Tensor& g);
  void zero_grad() const { impl_->grad.reset(); }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }
  // A tensor sharing storage with this one but outside the graph.
  Tensor detach() const;
  void backward() const;  // from a one-element tensor
  void backward(const Tensor& grad_output, bool retain_graph = false) const;

  // Element access by logical index, as double (slow: for tests, tools, small tensors). On a CUDA
  // tensor each goes through a host copy (to_vector and str copy the whole tensor).
  double item() const;
  double at(std::initializer_list<int64_t> index) const;
  void set_at(std::initializer_list<int64_t> index, double v) const;
  std::vector<double> to_vector() const;  // logical row-major order

  // Copies; differentiable (recorded in the graph like any op).
  Tensor contiguous() const;  // this tensor itself if already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor to(DType t) const;   // converted copy (this tensor itself if same dtype)
  // Raw view with the given geometry over the same storage; bounds are checked.
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  // In-place writes, outside the graph (for initialisation and optimizer updates).
  // Overwrites every element from `src` (same shape; dtypes may differ). Any strides on either side and
  // either device; a copy that ends on CUDA converts the dtype on the host first, and a strided copy
  // between two CUDA views runs the strided copy kernel (they must not share a storage).
  void copy_from(const Tensor& src) const;
  // On a CUDA tensor: 0 by cudaMemset when contiguous, anything else by one copy from the host.
  void fill(double v) const;

  std::string str() const;  // shape, dtype and (for small tensors) values

 private:
  std::shared_ptr<TensorImpl> impl_;
};

Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);
// Normalises a possibly negative axis; `op` names the caller in the error.
int64_t wrap_axis(int64_t axis, int64_t ndim, const char* op);

// Factories. All return contiguous CPU tensors, but empty_on.
Tensor empty(const Shape& shape, DType dtype = DType::F32);
// Uninitialised contiguous tensor on `device` (CPU: the same as empty). Device::CUDA throws eng::Error
// saying why when CUDA is not built or has no device (engine/cuda.h).
Tensor empty_on(const Shape& shape, DType dtype, Device device);
Tensor zeros_on(const Shape& shape, DType dtype, Device device);  // zeros on `device` (cudaMemset on CUDA)
Tensor zeros(const Shape& shape, DType dtype = DType::F32);
Tensor ones(const Shape& shape, DType dtype = DType::F32);
Tensor full(const Shape& shape, double value, DType dtype = DType::F32);
Tensor scalar_tensor(double value, DType dtype = DType::F32);
Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::F32);
Tensor from_vector(const std::vector<float>& values, const Shape& shape);
Tensor arange(int64_t n, DType dtype = DType::F32);
Tensor randn(const Shape& shape, Rng& rng, DType dtype = DType::F32);                      // N(0, 1)
Tensor rand(const Shape& shape, Rng& rng, DType dtype = DType::F32, double lo = 0, double hi = 1);  // U[lo, hi)

// A contiguous read-only tensor viewing `shape` elements of `dtype` at `data` without copying them (Storage's view
// constructor: `keeper` keeps the memory alive). `data` must be aligned to the element size.
Tensor view_memory(const void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> keeper);

// A contiguous copy of x on device d with x's shape and dtype, or x itself when it is already there.
// Outside the graph, like copy_from: the copy does not require grad and no gradient flows back to x.
Tensor to_device(const Tensor& x, Device d);

}  // namespace eng
