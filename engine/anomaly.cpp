#include "engine/anomaly.h"

#include <cmath>

#include "engine/error.h"
#include "engine/strided.h"

namespace eng {

namespace {
bool g_detect = false;
}  // namespace

int64_t first_nonfinite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return -1;
  const Tensor c = to_device(t, Device::CPU).contiguous();  // a CUDA tensor is checked in a host copy
  int64_t found = -1;
  ENG_DISPATCH(c.dtype(), T, {
    const T* p = static_cast<const T*>(c.raw_data());
    for (int64_t i = 0, n = c.numel(); i < n; ++i)
      if (!std::isfinite(p[i])) {
        found = i;
        break;
      }
  });
  return found;
}

std::string describe_nonfinite(const Tensor& t) {
  const int64_t i = first_nonfinite(t);
  if (i < 0) return "";
  const double x = to_device(t, Device::CPU).contiguous().to(DType::F64).to_vector()[size_t(i)];
  return str_cat(std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf", " at element ", i, " of ", t.shape());
}

void set_detect_anomaly(bool on) { g_detect = on; }
bool detect_anomaly() { return g_detect; }

void check_op_output(const char* op, const Tensor& out, const std::vector<Tensor>& inputs) {
  if (first_nonfinite(out) < 0) return;
  for (const Tensor& in : inputs)
    if (first_nonfinite(in) >= 0) return;
  fail("anomaly: op '", op, "' produced ", describe_nonfinite(out), " from finite inputs");
}

void check_op_gradient(const char* op, size_t i, const Tensor& grad_input, const Tensor& grad_output) {
  if (first_nonfinite(grad_input) < 0 || first_nonfinite(grad_output) >= 0) return;
  fail("anomaly: the backward of op '", op, "' produced ", describe_nonfinite(grad_input), " in the gradient of input ",
       i, " from a finite output gradient");
}

}  // namespace eng
