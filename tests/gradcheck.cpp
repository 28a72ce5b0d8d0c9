#include "tests/gradcheck.h"

#include <cmath>
#include <set>
#include <sstream>
#include <unordered_set>

#include "engine/error.h"

namespace eng::test {
namespace {

std::set<std::string> g_seen_ops;

void collect_ops(const Tensor& root) {
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  if (root.grad_fn()) stack.push_back(root.grad_fn().get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    g_seen_ops.insert(n->op);
    for (const Tensor& in : n->inputs)
      if (in.defined() && in.grad_fn()) stack.push_back(in.grad_fn().get());
  }
}

double weighted_sum(const Tensor& y, const Tensor& w) {
  auto yv = y.to_vector(), wv = w.to_vector();
  double s = 0;
  for (size_t i = 0; i < yv.size(); ++i) s += yv[i] * wv[i];
  return s;
}

}  // namespace

Tensor uniform(const Shape& shape, uint64_t seed, double lo, double hi) {
  Rng rng(seed);
  return rand(shape, rng, DType::F64, lo, hi);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE_MESSAGE(a.shape() == b.shape(), "shapes differ: ", shape_str(a.shape()), " vs ", shape_str(b.shape()));
  auto av = a.to_vector(), bv = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < av.size(); ++i) m = std::max(m, std::abs(av[i] - bv[i]));
  return m;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  auto av = a.to_vector(), bv = b.to_vector();
  for (size_t i = 0; i < av.size(); ++i)
    if (!(std::abs(av[i] - bv[i]) <= atol + rtol * std::abs(bv[i]))) return false;
  return true;
}

void check_gradients(const Fn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt,
                     const std::vector<Tensor>& constants) {
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) {
    Tensor x = t.to(DType::F64).clone().detach();
    x.set_requires_grad(true);
    xs.push_back(x);
  }
  auto call = [&](const std::vector<Tensor>& args) {
    std::vector<Tensor> all = args;
    all.insert(all.end(), constants.begin(), constants.end());
    return f(all);
  };
  Tensor y = call(xs);
  REQUIRE(y.requires_grad());
  collect_ops(y);
  Tensor w = uniform(y.shape(), 1234, -1, 1);
  y.backward(w);

  NoGradGuard no_grad;
  for (size_t k = 0; k < xs.size(); ++k) {
    Tensor g = xs[k].grad();
    REQUIRE_MESSAGE(g.defined(), "input ", k, " received no gradient");
    double* p = xs[k].data<double>();
    auto gv = g.to_vector();
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      double old = p[i];
      p[i] = old + opt.eps;
      double up = weighted_sum(call(xs), w);
      p[i] = old - opt.eps;
      double down = weighted_sum(call(xs), w);
      p[i] = old;
      double numeric = (up - down) / (2 * opt.eps);
      double analytic = gv[size_t(i)];
      bool ok = std::abs(numeric - analytic) <= opt.atol + opt.rtol * std::abs(numeric);
      if (!ok) {
        std::ostringstream os;
        os << "input " << k << " (shape " << shape_str(xs[k].shape()) << ") element " << i << ": analytic "
           << analytic << " vs numeric " << numeric;
        FAIL_CHECK(os.str());
        return;
      }
    }
  }
}

static std::vector<std::string>& names_storage() {
  static std::vector<std::string> names;
  return names;
}

void check_parameter_gradients(const std::vector<std::pair<std::string, Tensor>>& params,
                               const std::function<Tensor()>& f, const GradcheckOptions& opt) {
  for (const auto& named : params) {  // no structured bindings: clang 14 cannot capture them in doctest's macros
    const std::string& name = named.first;
    const Tensor& p = named.second;
    REQUIRE_MESSAGE(p.dtype() == DType::F64, "parameter ", name, " must be f64 (Module::to(DType::F64))");
    p.zero_grad();
  }
  Tensor y = f();
  REQUIRE(y.requires_grad());
  collect_ops(y);
  Tensor w = uniform(y.shape(), 4321, -1, 1);
  y.backward(w);
  NoGradGuard no_grad;
  for (const auto& named : params) {
    const std::string& name = named.first;
    const Tensor& p = named.second;
    Tensor g = p.grad();
    REQUIRE_MESSAGE(g.defined(), "parameter ", name, " received no gradient");
    double* d = p.data<double>();
    auto gv = g.to_vector();
    for (int64_t i = 0; i < p.numel(); ++i) {
      double old = d[i];
      d[i] = old + opt.eps;
      double up = weighted_sum(f(), w);
      d[i] = old - opt.eps;
      double down = weighted_sum(f(), w);
      d[i] = old;
      double numeric = (up - down) / (2 * opt.eps);
      if (!(std::abs(numeric - gv[size_t(i)]) <= opt.atol + opt.rtol * std::abs(numeric))) {
        std::ostringstream os;
        os << "parameter " << name << " element " << i << ": analytic " << gv[size_t(i)] << " vs numeric " << numeric;
        FAIL_CHECK(os.str());
        return;
      }
    }
  }
}

bool register_gradcheck(const char* op) {
  names_storage().push_back(op);
  return true;
}

const std::vector<std::string>& gradcheck_names() { return names_storage(); }

void begin_gradcheck_case() { g_seen_ops.clear(); }

bool gradcheck_saw_op(const char* op) { return g_seen_ops.count(op) > 0; }

}  // namespace eng::test
