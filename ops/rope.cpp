#include "ops/rope.h"

#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"

namespace eng {

ENG_REGISTER_OP("rope");

namespace {

// out = rotate(x, sign · angle) for every row; sign = -1 undoes the rotation (the backward). Pair i is the dims
// (i · step, i · step + gap): step 1, gap D/2 for rotate-half; step 2, gap 1 for interleaved.
Tensor rotate(const Tensor& x_in, int64_t offset, double base, RopePairing pairing, double sign) {
  Tensor x = x_in.contiguous();
  const int64_t L = x.size(-2), D = x.size(-1), half = D / 2;
  const int64_t rows = x.numel() / D;
  const int64_t step = pairing == RopePairing::RotateHalf ? 1 : 2, gap = pairing == RopePairing::RotateHalf ? half : 1;
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
          const int64_t j = i * step;
          o[j] = a[j] * c - a[j + gap] * s;
          o[j + gap] = a[j + gap] * c + a[j] * s;
        }
      }
    });
  });
  return out;
}

}  // namespace

RopePairing parse_rope_pairing(const std::string& name) {
  if (name == "rotate-half") return RopePairing::RotateHalf;
  if (name == "interleaved") return RopePairing::Interleaved;
  fail("rope: pairing must be rotate-half or interleaved, got '", name, "'");
}

const char* rope_pairing_name(RopePairing p) { return p == RopePairing::RotateHalf ? "rotate-half" : "interleaved"; }

Tensor rope(const Tensor& x, int64_t offset, double base, RopePairing pairing) {
  ENG_CHECK(x.dim() >= 2 && x.size(-1) % 2 == 0, "rope: input must be [..., L, D] with D even, got ", x.shape());
  ENG_CHECK(offset >= 0, "rope: negative offset ", offset);
  ENG_CHECK(base > 0 && std::isfinite(base), "rope: base must be positive and finite, got ", base);
  Tensor out = rotate(x, offset, base, pairing, 1.0);
  return record(out, "rope", {x}, [offset, base, pairing](const Tensor& g) {
    return std::vector<Tensor>{rotate(g, offset, base, pairing, -1.0)};
  });
}

}  // namespace eng
