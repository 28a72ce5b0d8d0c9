#include "ops/dropout.h"

#include <algorithm>

#include "engine/autograd.h"
#include "engine/batch_row.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "ops/binary.h"
#include "ops/cuda/dispatch.h"
#include "ops/kernel_util.h"

namespace eng {

ENG_REGISTER_OP("dropout");

Tensor dropout(const Tensor& x, double p, Rng& rng, bool training) {
  ENG_CHECK(x.defined(), "dropout: undefined x");
  ENG_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got ", p);
  ENG_CHECK(is_floating(x.dtype()), "dropout: x must be f32 or f64, got ", x.dtype(), " ", x.shape());
  if (!training || p == 0) return x;
  if (on_cuda(x)) return cuda_op::dropout(x, p, rng);
  // The mask holds 0 or 1 / (1 - p). Element j of row r uses word j of call.fork(first + r): Philox is
  // counter-based, so chunks draw in parallel and still match a serial draw.
  Tensor mask = empty(x.shape(), x.dtype());
  const Rng call = rng;
  const int64_t first = batch_first_row(), n = x.dim() == 0 ? 1 : mask.numel() / std::max<int64_t>(x.size(0), 1);
  const double scale = 1.0 / (1.0 - p);
  ENG_DISPATCH(x.dtype(), T, {
    T* m = mask.data<T>();
    parallel_for(0, mask.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi;) {
        const int64_t r = i / n, end = std::min(hi, (r + 1) * n);
        Rng local = call.fork(uint64_t(first + r));
        local.set_position(uint64_t(i - r * n));
        for (; i < end; ++i) m[i] = local.uniform() >= p ? T(scale) : T(0);
      }
    });
  });
  rng.set_position(call.position() + 1);
  Tensor out = map_binary(x, mask, "dropout", [](auto xv, auto mv) { return xv * mv; });
  return record(out, "dropout", {x}, [mask](const Tensor& g) { return std::vector<Tensor>{mul(g, mask)}; });
}

}  // namespace eng
