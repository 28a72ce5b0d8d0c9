// Helpers shared by the CUDA test files (tests/test_cuda.cpp, tests/test_cuda_attention.cpp): moving tensors
// between the devices, bitwise and tolerance comparisons, and the CPU's autograd in f64 as the reference.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cuda.h"
#include "engine/tensor.h"

namespace eng::cuda_test {

inline const double kNaN = std::numeric_limits<double>::quiet_NaN();
inline const double kInf = std::numeric_limits<double>::infinity();

inline bool have_device() { return cuda::device_count() > 0; }
inline Tensor dev(const Tensor& t) { return to_device(t, Device::CUDA); }
inline Tensor host(const Tensor& t) { return to_device(t, Device::CPU); }

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.raw_data(), b.raw_data(), size_t(a.numel()) * dtype_size(a.dtype())) == 0;
}

// Same dtype, shape and bits (NaN included); either may be on the device.
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && same_bytes(host(a).contiguous(), host(b).contiguous());
}

// Every element within atol + rtol |want| (equal values, infinities and NaN included, always pass);
// reports the first element that is not. `got` may be on the device.
inline void check_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector(), w = want.to_vector();
  size_t bad = g.size();
  for (size_t i = 0; i < g.size() && bad == g.size(); ++i) {
    const bool same = g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]));
    if (!same && !(std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]))) bad = i;
  }
  std::ostringstream msg;
  if (bad < g.size()) msg << what << ": element " << bad << " is " << g[bad] << ", expected " << w[bad];
  CHECK_MESSAGE(bad == g.size(), msg.str());
}

inline float* dptr(const Tensor& t) { return t.device_data<float>(); }

// The largest |x| of t (through a host copy).
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector()) m = std::max(m, std::fabs(x));
  return m;
}
inline const int64_t* iptr(const Tensor& t) { return t.device_data<int64_t>(); }
inline Tensor f64(const Tensor& t) { return t.to(DType::F64); }
inline Tensor dev_full(const Shape& s, double v) { return dev(full(s, v)); }

// Gradient of sum(f(x) * dy) with respect to x, by the CPU's autograd in f64.
inline Tensor cpu_grad(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, const Tensor& dy) {
  Tensor x64 = f64(x).set_requires_grad();
  f(x64).backward(f64(dy));
  return x64.grad();
}

}  // namespace eng::cuda_test
