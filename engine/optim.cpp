#include "engine/optim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_set>

#include "engine/autograd.h"
#include "engine/cuda.h"
#include "engine/error.h"
#include "engine/strided.h"
#include "engine/threadpool.h"
#include "engine/vec_kernels.h"

namespace eng {
namespace {

// Elements per parallel chunk: below this a parameter is updated on the calling thread.
constexpr int64_t kGrain = 1 << 14;

void check_lr(const char* opt, double lr) {
  ENG_CHECK(std::isfinite(lr) && lr >= 0, opt, ": lr must be finite and >= 0, got ", lr);
}

void check_beta(const char* opt, const char* what, double beta) {
  ENG_CHECK(beta >= 0 && beta < 1, opt, ": ", what, " must be in [0, 1), got ", beta);
}

void check_eps(const char* opt, double eps) {
  ENG_CHECK(std::isfinite(eps) && eps > 0, opt, ": eps must be finite and > 0, got ", eps);
}

void check_nonneg(const char* opt, const char* what, double v) {
  ENG_CHECK(std::isfinite(v) && v >= 0, opt, ": ", what, " must be finite and >= 0, got ", v);
}

bool is_state_name(const std::string& n) { return n.compare(0, 6, "optim.") == 0; }

// The updates without a CUDA kernel refuse CUDA parameters instead of reading device memory on the host.
void check_on_cpu(const char* opt, const Tensor& param) {
  ENG_CHECK(param.device() == Device::CPU, opt, ": parameter of shape ", param.shape(), " is on ",
            device_name(param.device()), "; only Adam and AdamW update cuda parameters");
}

}  // namespace

Optimizer::Optimizer(const char* name, NamedTensors named_params, double lr)
    : name_(name), params_(std::move(named_params)) {
  ENG_CHECK(!params_.empty(), name_, ": no parameters to optimize");
  std::map<std::string, size_t> seen_names;
  std::map<std::pair<const Storage*, int64_t>, size_t> seen_data;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [n, p] = params_[i];
    ENG_CHECK(!n.empty(), name_, ": parameter ", i, " has an empty name");
    ENG_CHECK(p.defined(), name_, ": parameter '", n, "' is an undefined tensor");
    ENG_CHECK(is_floating(p.dtype()), name_, ": parameter '", n, "' is ", p.dtype(), "; parameters are f32 or f64");
    ENG_CHECK(p.is_contiguous(), name_, ": parameter '", n, "' of shape ", p.shape(), " is not contiguous");
    auto [it, fresh] = seen_names.emplace(n, i);
    ENG_CHECK(fresh, name_, ": parameter name '", n, "' appears twice");
    // Two entries over the same data would be updated twice per step (tied weights belong once).
    auto [jt, fresh_data] = seen_data.emplace(std::make_pair(p.storage().get(), p.offset()), i);
    ENG_CHECK(fresh_data, name_, ": parameter '", n, "' shares its data with '", params_[jt->second].first, "'");
  }
  set_lr(lr);
}

void Optimizer::set_lr(double lr) {
  check_lr(name_, lr);
  lr_ = lr;
}

std::vector<Tensor> Optimizer::params() const {
  std::vector<Tensor> out;
  for (const auto& np : params_) out.push_back(np.second);
  return out;
}

Tensor Optimizer::add_state(const std::string& kind, size_t param, bool counter) {
  const Tensor& p = params_[param].second;
  // the step counter stays on the host, which computes the bias corrections from it
  Tensor t = counter ? zeros({}, DType::I64) : zeros_on(p.shape(), p.dtype(), p.device());
  state_.emplace_back("optim." + kind + "." + params_[param].first, t);
  return t;
}

void Optimizer::step() {
  NoGradGuard no_grad;
  for (const auto& [n, p] : params_) {
    Tensor g = p.grad();
    ENG_CHECK(!g.defined() || g.dtype() == p.dtype(), name_, ": gradient of '", n, "' is ", g.dtype(),
              " but the parameter is ", p.dtype());
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    Tensor g = p.grad();
    if (g.defined()) update(i, p, g.contiguous());
  }
  ++steps_;
}

void Optimizer::zero_grad() {
  for (auto& np : params_) np.second.zero_grad();
}

NamedTensors Optimizer::state() const {
  NoGradGuard no_grad;
  NamedTensors out;
  for (const auto& [n, t] : state_) out.emplace_back(n, t.clone());
  return out;
}

void Optimizer::load_state(const NamedTensors& s, int64_t steps) {
  ENG_CHECK(steps >= 0, name_, ": load_state: steps must be >= 0, got ", steps);
  std::map<std::string, const Tensor*> given;
  for (const auto& [n, t] : s) {
    if (!is_state_name(n)) continue;
    ENG_CHECK(given.emplace(n, &t).second, name_, ": load_state: state '", n, "' appears twice");
  }
  for (const auto& [n, t] : state_) {
    auto it = given.find(n);
    ENG_CHECK(it != given.end(), name_, ": load_state: missing state '", n, "'");
    const Tensor& src = *it->second;
    ENG_CHECK(src.defined(), name_, ": load_state: state '", n, "' is an undefined tensor");
    ENG_CHECK(src.shape() == t.shape(), name_, ": load_state: state '", n, "' has shape ", src.shape(),
              ", expected ", t.shape());
  }
  if (given.size() != state_.size()) {
    std::unordered_set<std::string> mine;
    for (const auto& st : state_) mine.insert(st.first);
    for (const auto& g : given)
      ENG_CHECK(mine.count(g.first), name_, ": load_state: unexpected state '", g.first, "'");
  }
  for (const auto& [n, t] : state_) t.copy_from(*given.at(n));
  steps_ = steps;
}

SGD::SGD(NamedTensors params, double lr, double momentum, double weight_decay, bool nesterov)
    : Optimizer("SGD", std::move(params), lr), momentum_(momentum), weight_decay_(weight_decay), nesterov_(nesterov) {
  check_nonneg(name_, "momentum", momentum);
  check_nonneg(name_, "weight_decay", weight_decay);
  ENG_CHECK(!nesterov || momentum > 0, name_, ": nesterov needs momentum > 0");
  if (momentum != 0)
    for (size_t i = 0; i < named_params().size(); ++i) buf_.push_back(add_state("momentum_buffer", i));
}

void SGD::update(size_t i, const Tensor& param, const Tensor& grad) {
  check_on_cpu(name_, param);
  const double lr = this->lr(), mu = momentum_, wd = weight_decay_;
  const bool nesterov = nesterov_;
  ENG_DISPATCH(param.dtype(), T, {
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* b = mu != 0 ? buf_[i].data<T>() : nullptr;
    parallel_for(0, param.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        double d = double(g[k]);
        if (wd != 0) d += wd * double(p[k]);
        if (b) {
          const double bk = mu * double(b[k]) + d;
          b[k] = T(bk);
          d = nesterov ? d + mu * bk : bk;
        }
        p[k] = T(double(p[k]) - lr * d);
      }
    });
  });
}

namespace {

// f32 parameters: the SIMD Adam kernel (engine/vec_kernels.h) over chunks of the tensor.
void adam_f32(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamStep& s) {
  float *p = param.data<float>(), *pm = m.data<float>(), *pv = v.data<float>();
  const float* g = grad.data<float>();
  const auto kernel = vec_kernels().adam;
  parallel_for(0, param.numel(), kGrain,
               [&](int64_t lo, int64_t hi) { kernel(p + lo, g + lo, pm + lo, pv + lo, hi - lo, s); });
}

}  // namespace

Adam::Adam(NamedTensors params, double lr, double beta1, double beta2, double eps, double weight_decay)
    : Adam("Adam", std::move(params), lr, beta1, beta2, eps, weight_decay, false) {}

Adam::Adam(const char* name, NamedTensors params, double lr, double beta1, double beta2, double eps,
           double weight_decay, bool decoupled)
    : Optimizer(name, std::move(params), lr),
      beta1_(beta1),
      beta2_(beta2),
      eps_(eps),
      weight_decay_(weight_decay),
      decoupled_(decoupled) {
  check_beta(name_, "beta1", beta1);
  check_beta(name_, "beta2", beta2);
  check_eps(name_, eps);
  check_nonneg(name_, "weight_decay", weight_decay);
  for (size_t i = 0; i < named_params().size(); ++i) {
    exp_avg_.push_back(add_state("exp_avg", i));
    exp_avg_sq_.push_back(add_state("exp_avg_sq", i));
    step_.push_back(add_state("step", i, true));
  }
}

void Adam::update(size_t i, const Tensor& param, const Tensor& grad) {
  const int64_t t = ++*step_[i].data<int64_t>();
  const double lr = this->lr(), b1 = beta1_, b2 = beta2_, eps = eps_, wd = weight_decay_;
  const bool decoupled = decoupled_;
  if (param.device() == Device::CUDA) {
    ENG_CHECK(param.dtype() == DType::F32, name_, ": cuda parameters are f32, got ", param.dtype());
    return cuda::adam_update(param.device_data<float>(), grad.device_data<float>(), exp_avg_[i].device_data<float>(),
                             exp_avg_sq_[i].device_data<float>(), param.numel(), lr, b1, b2, eps, wd, decoupled, t);
  }
  const double step_size = lr / (1 - std::pow(b1, double(t)));
  const double bc2_sqrt = std::sqrt(1 - std::pow(b2, double(t)));
  if (param.dtype() == DType::F32) {
    const AdamStep s{float(decoupled ? 1 - lr * wd : 1.0), float(decoupled ? 0.0 : wd), float(b1), float(b2),
                     float(step_size), float(1 / bc2_sqrt), float(eps), true};
    return adam_f32(param, grad, exp_avg_[i], exp_avg_sq_[i], s);
  }
  ENG_DISPATCH(param.dtype(), T, {
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg_[i].data<T>();
    T* v = exp_avg_sq_[i].data<T>();
    parallel_for(0, param.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        double pk = double(p[k]), gk = double(g[k]);
        if (wd != 0) {
          if (decoupled)
            pk *= 1 - lr * wd;
          else
            gk += wd * pk;
        }
        const double mk = b1 * double(m[k]) + (1 - b1) * gk;
        const double vk = b2 * double(v[k]) + (1 - b2) * gk * gk;
        m[k] = T(mk);
        v[k] = T(vk);
        p[k] = T(pk - step_size * mk / (std::sqrt(vk) / bc2_sqrt + eps));
      }
    });
  });
}

AdamW::AdamW(NamedTensors params, double lr, double beta1, double beta2, double eps, double weight_decay)
    : Adam("AdamW", std::move(params), lr, beta1, beta2, eps, weight_decay, true) {}

RAdam::RAdam(NamedTensors params, double lr, double beta1, double beta2, double eps, double weight_decay)
    : Adam("RAdam", std::move(params), lr, beta1, beta2, eps, weight_decay, false) {}

void RAdam::update(size_t i, const Tensor& param, const Tensor& grad) {
  check_on_cpu(name_, param);
  const int64_t t = ++*step_[i].data<int64_t>();
  const double lr = this->lr(), b1 = beta1_, b2 = beta2_, eps = eps_, wd = weight_decay_;
  const double bc1 = 1 - std::pow(b1, double(t));
  const double bc2 = 1 - std::pow(b2, double(t));
  const double rho_inf = 2 / (1 - b2) - 1;
  const double rho_t = rho_inf - 2 * double(t) * std::pow(b2, double(t)) / bc2;
  const bool rectified = rho_t > 5;
  // The whole per-element factor but m and the adaptive denominator, as PyTorch groups it.
  const double scale =
      rectified ? lr / bc1 * std::sqrt(bc2) *
                      std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                : lr / bc1;
  if (param.dtype() == DType::F32)
    return adam_f32(param, grad, exp_avg_[i], exp_avg_sq_[i],
                    AdamStep{1.f, float(wd), float(b1), float(b2), float(scale), 1.f, float(eps), rectified});
  ENG_DISPATCH(param.dtype(), T, {
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg_[i].data<T>();
    T* v = exp_avg_sq_[i].data<T>();
    parallel_for(0, param.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        const double pk = double(p[k]);
        double gk = double(g[k]);
        if (wd != 0) gk += wd * pk;
        const double mk = b1 * double(m[k]) + (1 - b1) * gk;
        const double vk = b2 * double(v[k]) + (1 - b2) * gk * gk;
        m[k] = T(mk);
        v[k] = T(vk);
        p[k] = T(rectified ? pk - scale * mk / (std::sqrt(vk) + eps) : pk - scale * mk);
      }
    });
  });
}

namespace {

// Sum of squares in double over fixed blocks added in order, so the result does not depend on
// the thread count.
double sum_squares(const Tensor& g) {
  if (g.device() == Device::CUDA) {
    ENG_CHECK(g.dtype() == DType::F32, "clip_grad_norm: cuda gradients are f32, got ", g.dtype());
    return cuda::sum_squares(g.device_data<float>(), g.numel());
  }
  constexpr int64_t kBlock = kGrain;
  const int64_t n = g.numel(), nblocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(size_t(nblocks), 0.0);
  ENG_DISPATCH(g.dtype(), T, {
    const T* x = g.data<T>();
    parallel_for(0, nblocks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        double s = 0;
        for (int64_t k = b * kBlock, e = std::min(n, k + kBlock); k < e; ++k) s += double(x[k]) * double(x[k]);
        partial[size_t(b)] = s;
      }
    });
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void scale_in_place(const Tensor& g, double c) {
  if (g.device() == Device::CUDA) {
    ENG_CHECK(g.dtype() == DType::F32 && g.is_contiguous(), "clip_grad_norm: a cuda gradient must be f32 and "
              "contiguous, got ", g.dtype(), " with strides ", g.strides());
    return cuda::scale(g.device_data<float>(), g.numel(), c);
  }
  ENG_DISPATCH(g.dtype(), T, {
    if (g.is_contiguous()) {
      T* x = g.data<T>();
      parallel_for(0, g.numel(), kGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t k = lo; k < hi; ++k) x[k] = T(double(x[k]) * c);
      });
    } else {
      T* base = static_cast<T*>(g.storage()->data);
      for_each_offset<1>(g.shape(), {g.strides().data()}, {g.offset()},
                         [&](auto o) { base[o[0]] = T(double(base[o[0]]) * c); });
    }
  });
}

}  // namespace

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  ENG_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  std::unordered_set<const TensorImpl*> seen;
  for (const Tensor& p : params) {
    Tensor g = p.defined() ? p.grad() : Tensor();
    if (g.defined() && seen.insert(g.impl()).second) grads.push_back(g);
  }
  double sq = 0;
  for (const Tensor& g : grads) sq += sum_squares(g.contiguous());
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const double c = max_norm / (norm + 1e-6);
  for (const Tensor& g : grads) scale_in_place(g, c);
  return norm;
}

}  // namespace eng
