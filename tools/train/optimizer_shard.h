// ZeRO-1 (Rajbhandari et al. 2020, stage 1) for build/train --shard-optimizer: the parameters, laid end to end in
// the optimizer's order, are cut into `ranks` even slices (engine/comm.h even_slices); rank r's optimizer is built
// over its slice only, as 1-D views ("pieces") of the parameters it overlaps, so it holds 1/N of the moments
// (Adam's m and v, SGD's momentum). Each step every rank sets its pieces' gradients from the summed gradient,
// updates them in place, and the slices are all-gathered into every rank's parameters.
// Over several ranks (data_parallel.h) the gradients are reduce-scattered: each rank receives the sums of its slice
// only, clips them by the global norm (computed exactly from every rank's slice, so it has the unsharded bits), and
// the non-finite check reads that norm. The update is element-wise and each piece keeps its parameter's name and
// step counter, so the weights are the unsharded run's bit for bit. Checkpoints hold the whole state (gathered), in
// the one-process format.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "engine/comm.h"
#include "engine/optim.h"

namespace eng::jobs {

using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(NamedTensors)>;

class OptimizerShard {
 public:
  // params: every parameter, f32 and contiguous, in the order of the unsharded optimizer.
  OptimizerShard(Communicator& comm, NamedTensors params);
  // This rank's pieces, for the factory that makes its optimizer.
  const NamedTensors& pieces() const { return pieces_; }
  // Before the local optimizer's step: each piece's gradient is its slice of the parameter's gradient (one process),
  // or of the flat summed gradients `flat` (data_parallel.h sums(): this rank's slice; none where !has_grad).
  void set_piece_grads();
  void set_piece_grads(const float* flat, const std::vector<unsigned char>& has_grad);
  // After it: every rank's slice into every rank's parameters; the pieces' gradients are dropped.
  void gather_parameters();
  // A whole optimizer (made by `make` over every parameter) holding every rank's state of `local`: what a checkpoint
  // saves. Every rank must call it.
  std::unique_ptr<Optimizer> gather_state(const Optimizer& local, const OptimizerFactory& make) const;
  // This rank's slices of a whole optimizer's state (a resumed checkpoint) into `local`.
  void scatter_state(const Optimizer& whole, Optimizer& local) const;

 private:
  Communicator& comm_;
  NamedTensors params_, pieces_;
  std::vector<size_t> offsets_;      // params_[i] is the flat range [offsets_[i], offsets_[i+1])
  std::vector<size_t> slices_;       // rank r owns [slices_[r], slices_[r+1])
  std::vector<size_t> piece_param_;  // pieces_[j] is a view of params_[piece_param_[j]]
  std::vector<int64_t> piece_start_; // ... from this element of the flattened parameter
  std::vector<float> flat_;          // scratch for the all-gathers
};

}  // namespace eng::jobs
