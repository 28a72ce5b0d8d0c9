// Finite-difference gradient checks. Each differentiable op has a GRADCHECK("name") case; the
// registry test proves every registered op has one, and each case fails unless a node of its op
// appears in a graph it checked.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/rng.h"
#include "engine/tensor.h"

namespace eng::test {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step (inputs are f64)
  double atol = 1e-7;
  double rtol = 1e-5;
};

// Converts the inputs to f64 leaves requiring grad, builds y = f(inputs), and checks the analytic
// gradient of sum(w * y) (w random) against central differences, element by element. Inputs whose
// grads are not wanted (integer indices) are passed in `constants` and given to f after `inputs`.
void check_gradients(const Fn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt = {},
                     const std::vector<Tensor>& constants = {});

// The same check for the parameters of a module (converted to f64 first): f() builds the output from
// the module's current parameters; each parameter element is perturbed in place.
void check_parameter_gradients(const std::vector<std::pair<std::string, Tensor>>& params,
                               const std::function<Tensor()>& f, const GradcheckOptions& opt = {});

// Random f64 tensor with entries in [lo, hi).
Tensor uniform(const Shape& shape, uint64_t seed, double lo = -1, double hi = 1);

// True when every element differs by at most atol + rtol * |b|.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-6);
// The largest |a - b| over all elements (shapes must match).
double max_abs_diff(const Tensor& a, const Tensor& b);

// Applies `op` to `xs` in f32 and f64 and compares with `ref` evaluated in double (f32 at rtol32).
template <class Op, class Ref>
void check_values(const std::vector<double>& xs, Op op, Ref ref, double rtol32 = 1e-6) {
  std::vector<double> expect;
  for (double x : xs) expect.push_back(ref(x));
  Tensor want = from_vector(expect, {int64_t(xs.size())}, DType::F64);
  Tensor y64 = op(from_vector(xs, {int64_t(xs.size())}, DType::F64));
  Tensor y32 = op(from_vector(xs, {int64_t(xs.size())}, DType::F32));
  CHECK(y64.dtype() == DType::F64);
  CHECK(y32.dtype() == DType::F32);
  CHECK(allclose(y64, want, 1e-14, 1e-15));
  CHECK(allclose(y32, want, rtol32, 1e-7));
}

bool register_gradcheck(const char* op);
const std::vector<std::string>& gradcheck_names();
void begin_gradcheck_case();
bool gradcheck_saw_op(const char* op);

}  // namespace eng::test

#define ENG_GRADCHECK_IMPL(op, body)                                                              \
  static void body();                                                                             \
  static const bool ENG_CONCAT(body, _registered) = ::eng::test::register_gradcheck(op);         \
  TEST_CASE("gradcheck " op) {                                                                    \
    ::eng::test::begin_gradcheck_case();                                                          \
    body();                                                                                       \
    CHECK_MESSAGE(::eng::test::gradcheck_saw_op(op), "no node of op '" op "' in the checked graphs"); \
  }                                                                                               \
  static void body()
#define GRADCHECK(op) ENG_GRADCHECK_IMPL(op, ENG_CONCAT(gradcheck_body_, __LINE__))
