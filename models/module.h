// Module: a named tree of parameters (trained) and buffers (state that is not trained but must survive a
// checkpoint, e.g. a counter that decides when random features are redrawn). Names are dotted paths ("decoder.layers.0.attn.q_proj.weight")
// and are the checkpoint keys (docs/checkpoint.md). Parameters are Tensor handles shared with the
// owning layer's members, so an optimizer's in-place update or a checkpoint load is seen by the layer.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace eng {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its children, depth first in registration order.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  // Every buffer of this module and its children, named like parameters; checkpoints save them too.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // The parameters inference may hold quantized (ops/quant.h, models/quantized.h), named like parameters: the
  // weights of Linear layers and embedding tables, except where a layer reads its weight other than through its
  // own forward().
  std::vector<std::pair<std::string, Tensor>> named_quantizable() const;

  // Training mode (dropout active) for this module and all children.
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }
  void zero_grad();
  // Converts every parameter to `dtype` in place (the handles held by layers see the change);
  // gradients are dropped. Used to run whole models in f64 for gradient checks.
  void to(DType dtype);
  // Moves every parameter and buffer to `device` in place (the handles held by layers see the change);
  // gradients are dropped. Throws eng::Error saying why when CUDA is not built or has no device. Tensors a
  // layer holds outside its parameters and buffers stay where they are: only modules whose ops run on
  // CUDA (docs/cuda.md) are usable there.
  void to(Device device);

 protected:
  // Registers `t` (made a leaf requiring grad) under `name` and returns it.
  Tensor register_parameter(const std::string& name, Tensor t);
  // Registers `t` as a buffer under `name` (no gradient; `to(dtype)` leaves it alone) and returns it.
  Tensor register_buffer(const std::string& name, Tensor t);
  // Registers a child owned by the caller (a member, or held in a unique_ptr); it must outlive this.
  void register_module(const std::string& name, Module& child);
  // Marks the registered parameter `name` as one inference may quantize, or unmarks it.
  void set_quantizable(const std::string& name, bool on);

 private:
  void collect(const std::string& prefix, bool buffers, std::vector<std::pair<std::string, Tensor>>& out) const;
  void collect_quantizable(const std::string& prefix, std::vector<std::string>& out) const;
  std::vector<std::pair<std::string, Tensor>> params_, buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::vector<std::string> quantizable_;
  bool training_ = true;
};

}  // namespace eng
