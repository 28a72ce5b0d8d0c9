#include "ops/rope.h"

#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"

namespace eng {

ENG_REGISTER_OP("rope");

namespace {

// out = rotate(x, sign · angle) for every row; sign = -1 undoes the rotation (the backward).
Tensor rotate(const Tensor& x_in, int64_t offset, double base, double sign) {
  Tensor x = x_in.contiguous();
  const int64_t L = x.size(-2), D = x.size(-1), half = D / 2;
  const int64_t rows = x.numel() / D;
  Tensor out = empty(x.shape(), x.dtype());
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[size_t(i)] = std::pow(base, -2.0 * double(i) / double(D));
  ENG_DISPATCH(x.dtype(), T, {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(0, rows, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const double pos = double(offset + r % L);
        const T* a = px + r * D;
        T* o = po + r * D;
        for (int64_t i = 0; i < half; ++i) {
          const double ang = pos * inv_freq[size_t(i)];
          const T c = T(std::cos(ang)), s = T(sign * std::sin(ang));
          o[i] = a[i] * c - a[i + half] * s;
          o[i + half] = a[i + half] * c + a[i] * s;
        }
      }
    });
  });
  return out;
}

}  // namespace

Tensor rope(const Tensor& x, int64_t offset, double base) {
  ENG_CHECK(x.dim() >= 2 && x.size(-1) % 2 == 0, "rope: input must be [..., L, D] with D even, got ", x.shape());
  ENG_CHECK(offset >= 0, "rope: negative offset ", offset);
  Tensor out = rotate(x, offset, base, 1.0);
  return record(out, "rope", {x}, [offset, base](const Tensor& g) {
    return std::vector<Tensor>{rotate(g, offset, base, -1.0)};
  });
}

}  // namespace eng
