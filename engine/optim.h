// Optimizers over named parameters (they know tensors, never models), with PyTorch's update rules.
//
// - step() updates every parameter whose .grad is defined, in place, with grad mode off; parameters
//   without a grad are skipped and their state is left untouched (like torch.optim).
// - State is zero-initialised per parameter when the optimizer is built, in the parameter's dtype,
//   and named "optim.<kind>.<parameter name>" (kinds: momentum_buffer, exp_avg, exp_avg_sq, step).
//   Adam-type optimizers count steps per parameter ("optim.step.<name>", a 0-d i64 tensor), as
//   PyTorch does, so a parameter that skipped steps gets its own bias correction; steps() counts
//   the calls to step() and is what a learning-rate schedule reads.
// - Element math runs in double; parameters and state keep their dtype (f32 or f64).
// - CUDA parameters (f32): Adam and AdamW update them on the device (engine/cuda.h adam_update), with their
//   state there too; SGD and RAdam refuse them. clip_grad_norm works on CUDA gradients.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace eng {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates the parameters from their grads and counts one step. Grad dtypes are checked for every
  // parameter before any is changed.
  void step();
  // Drops every parameter's grad (sets it undefined, so an unused parameter is skipped next step).
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr);
  int64_t steps() const { return steps_; }
  const char* name() const { return name_; }
  const NamedTensors& named_params() const { return params_; }
  std::vector<Tensor> params() const;

  // Copies of the state tensors (later steps do not change them), in a fixed order.
  NamedTensors state() const;
  // Copies values into the state and sets steps(). Entries whose names do not start with "optim."
  // are ignored, so a whole checkpoint may be passed; every state name must be present exactly
  // once with the same shape, and no other "optim." name may appear. Nothing changes on error.
  void load_state(const NamedTensors& s, int64_t steps);

 protected:
  // `name` (e.g. "Adam") starts every error message. Parameters must be defined, f32 or f64,
  // contiguous, with unique non-empty names and distinct data.
  Optimizer(const char* name, NamedTensors named_params, double lr);
  // Adds the zero state "optim.<kind>.<name of parameter i>", shaped like the parameter, or a 0-d
  // i64 step counter when `counter` is set. Returns the handle the update writes through.
  Tensor add_state(const std::string& kind, size_t param, bool counter = false);
  // Updates parameter i from its grad (same shape and dtype, contiguous); grad mode is off.
  virtual void update(size_t i, const Tensor& param, const Tensor& grad) = 0;

  const char* name_;

 private:
  NamedTensors params_;
  NamedTensors state_;
  double lr_ = 0;
  int64_t steps_ = 0;
};

// PyTorch's SGD without dampening: g += wd * p; with momentum, b = momentum * b + g (b = g at the
// first step, since b starts at zero) and g = nesterov ? g + momentum * b : b; then p -= lr * g.
class SGD : public Optimizer {
 public:
  SGD(NamedTensors params, double lr, double momentum = 0, double weight_decay = 0, bool nesterov = false);

 private:
  void update(size_t i, const Tensor& param, const Tensor& grad) override;
  double momentum_, weight_decay_;
  bool nesterov_;
  std::vector<Tensor> buf_;
};

// Adam (Kingma & Ba 2014) as torch.optim.Adam: weight_decay is an L2 term added to the grad.
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  t = per-parameter step
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
class Adam : public Optimizer {
 public:
  Adam(NamedTensors params, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
       double weight_decay = 0);

 protected:
  // decoupled: weight decay as AdamW's p *= 1 - lr * wd before the update, instead of L2 in the grad.
  Adam(const char* name, NamedTensors params, double lr, double beta1, double beta2, double eps, double weight_decay,
       bool decoupled);

 protected:
  void update(size_t i, const Tensor& param, const Tensor& grad) override;
  double beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_, step_;  // the moments and step counters RAdam shares
};

// AdamW (Loshchilov & Hutter 2017) as torch.optim.AdamW: p *= 1 - lr * wd, then the Adam update.
class AdamW : public Adam {
 public:
  AdamW(NamedTensors params, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weight_decay = 0.01);
};

// RAdam (Liu et al. 2019) as torch.optim.RAdam (L2 weight decay in the grad):
//   m, v as Adam; m_hat = m / (1 - b1^t); rho_inf = 2 / (1 - b2) - 1;
//   rho_t = rho_inf - 2 t b2^t / (1 - b2^t)
//   rho_t > 5: r = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
//              p -= lr * m_hat * r * sqrt(1 - b2^t) / (sqrt(v) + eps)
//   otherwise: p -= lr * m_hat   (the variance of the adaptive rate is not yet tractable)
// It keeps Adam's state and checks, with its own update.
class RAdam : public Adam {
 public:
  RAdam(NamedTensors params, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weight_decay = 0);

 private:
  void update(size_t i, const Tensor& param, const Tensor& grad) override;
};

// Global L2 norm of the grads of `params` (summed in double; a grad shared by several entries counts
// once). When norm > max_norm, scales every grad in place by max_norm / (norm + 1e-6). Returns the
// norm before clipping; a non-finite norm is returned as is and the grads are left untouched.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace eng
