// Steps made of several micro-batches, in one process (--accum K) or over the ranks of an MPI job (each rank
// --batch / ranks sequences; docs/distributed.md). The rules that make N ranks with --accum 1 repeat one process
// with --accum N bit for bit, and make the data and randomness of a step independent of how it is split:
// - A step's batch is K micro-batches of b rows; global micro-batch k (k = rank * accum + m) holds the step's rows
//   [k b, (k + 1) b). Row g draws its data from the step's data generator forked at g (Rng::fork, job.h), and its
//   dropout masks from the model's generator forked at g (ops/dropout.h), whatever micro-batch or rank holds it:
//   the rows of --batch 6 are those of --batch 3 --accum 2 and of 2 or 3 ranks. Every micro-batch starts from the
//   step's state (StepStart, job.h): the same data and model generators, and the same buffers, so that per-batch
//   randomness (an attention's random rotations or features, chosen by its call counter) is the step's, shared by
//   all rows. After the step the data generator moves on by one word; the model's generator and buffers stand
//   where every micro-batch left them. A buffer a forward updates from its data (routing's centroids) keeps the
//   last micro-batch's update, computed from the step's start, on each rank.
// - Each micro-batch's loss is scaled by 1 / K (K = ranks * accum), and its gradients g_k are summed in order,
//   ((g_0 + g_1) + g_2) + ..., in f32: --reduce exact sums over ranks in rank order (engine/comm.h), so the sum
//   is the one process's. --reduce fast lets MPI choose the order (equal within rounding) and overlaps the
//   reduction with backward: the parameters, from the last, are cut into kBuckets buckets (about a layer each on
//   the reference model) and a bucket's all-reduce starts as soon as the last use of its last parameter has added
//   its gradient (engine/autograd.h set_leaf_grad_hook), while backward computes the layers below. How many
//   gradients each parameter receives per backward is learned on the first step (reduced after backward); a later
//   step whose graph uses a parameter a different number of times stops with an error, on every rank.
// - Losses and counts are gathered and summed in micro-batch order; the gradient norm of the summed gradients is
//   computed exactly (engine/exact_norm.h), so that it has the same bits on every rank, sharded or not.
// A step of one micro-batch in one process (the default) does not come here: it runs as before, bit for bit.
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/comm.h"
#include "engine/rng.h"
#include "tools/train/job.h"

namespace eng::jobs {

// What the micro-batches of a step add up to, over every rank: loss = Σ_k loss_k / K in k order, and the counts.
struct StepTotals {
  double loss = 0;
  StepResult counts;  // correct, counted, tokens, edits, labels summed; loss undefined
};

class DataParallel {
 public:
  // Parameters must be f32 on the cpu. `accum` micro-batches per rank and step.
  DataParallel(Communicator& comm, std::vector<Tensor> params, int64_t accum, ReduceOrder order);
  int64_t micro_batches() const { return int64_t(comm_.size()) * accum_; }  // K
  // --shard-optimizer (optimizer_shard.h): exact sums are reduce-scattered, each rank receiving only its slice of
  // the flat gradients (even_slices over the ranks), and no parameter's .grad is set: the shard reads sums().
  void shard_gradients();
  // This rank's micro-batches of one step, each of `batch` sequences (global micro-batch k holds the step's rows
  // [k batch, (k + 1) batch)), and the sum of their gradients over all K micro-batches and every rank.
  StepTotals forward_backward(Job& job, Rng& data, int64_t batch);
  // Then: the global norm of the summed gradients, which are scaled by max_norm / (norm + 1e-6) when the norm is
  // finite and above max_norm (as clip_grad_norm), and, unsharded, set as every parameter's .grad (undefined where no
  // micro-batch on any rank gave one). Returns the norm before clipping.
  double finish(double max_norm);
  const float* sums() const { return sum_.data(); }  // flat, in params order; sharded, this rank's slice is summed
  const std::vector<unsigned char>& has_grad() const { return has_grad_; }
  // For the benchmark: the bytes each rank sends per step for the gradients (2 (N - 1) / N of them, what both the
  // ordered reduce-scatter + all-gather and a ring all-reduce send), and the seconds spent so far waiting in
  // collectives (gradients, then losses and counts).
  size_t bytes_per_step() const;
  double comm_seconds() const { return comm_seconds_; }

 private:
  static constexpr size_t kBuckets = 8;
  struct Bucket {
    size_t first, last;  // parameters [first, last), sum_[offsets_[first], offsets_[last])
    int waiting = 0;     // parameters of the bucket whose gradient is not complete yet
  };
  void add_grad(size_t i, bool first);  // parameter i's .grad into sum_ (copied when `first`)
  void backward_overlapped(const Tensor& loss, bool first);  // --reduce fast after the first step
  void launch(size_t b);
  void reduce(bool reduced);  // sum_ over ranks (unless `reduced` already)

  Communicator& comm_;
  std::vector<Tensor> params_;
  std::vector<size_t> offsets_;  // params_[i] is sum_[offsets_[i], offsets_[i+1])
  int64_t accum_;
  ReduceOrder order_;
  std::vector<float> sum_;
  std::vector<unsigned char> has_grad_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // parameter -> bucket
  std::unordered_map<const TensorImpl*, size_t> index_;  // parameter -> position in params_
  std::vector<int> uses_, seen_;   // gradients added per backward: learned on the first step; this backward
  std::vector<std::unique_ptr<PendingReduce>> in_flight_;
  double comm_seconds_ = 0;
  bool sharded_ = false;
  std::vector<size_t> slices_;  // sharded: rank r sums [slices_[r], slices_[r+1])
};

}  // namespace eng::jobs
