#include "tools/train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "engine/autograd.h"
#include "engine/error.h"
#include "ops/binary.h"
#include "engine/exact_norm.h"

namespace eng::jobs {
namespace {

// Adds the seconds of its lifetime to `total`.
class Timed {
 public:
  explicit Timed(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~Timed() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

DataParallel::DataParallel(Communicator& comm, std::vector<Tensor> params, int64_t accum, ReduceOrder order)
    : comm_(comm), params_(std::move(params)), accum_(accum), order_(order) {
  ENG_CHECK(accum_ >= 1, "train: --accum must be at least 1, got ", accum_);
  offsets_.push_back(0);
  for (const Tensor& p : params_) {
    ENG_CHECK(p.dtype() == DType::F32 && p.device() == Device::CPU, "train: micro-batches (--accum above 1 or several "
              "ranks) need f32 parameters on the cpu, got ", p.dtype(), " on ", device_name(p.device()));
    offsets_.push_back(offsets_.back() + size_t(p.numel()));
  }
  sum_.resize(offsets_.back());
  has_grad_.resize(params_.size());
  // Buckets from the last parameter down (backward reaches the last layers first), each at least 1/kBuckets of all.
  bucket_of_.resize(params_.size());
  for (size_t last = params_.size(); last > 0;) {
    Bucket b{last, last};
    while (b.first > 0 && (b.first == last || offsets_[last] - offsets_[b.first] < sum_.size() / kBuckets)) --b.first;
    for (size_t i = b.first; i < b.last; ++i) bucket_of_[i] = buckets_.size();
    buckets_.push_back(b);
    last = b.first;
  }
  for (size_t i = 0; i < params_.size(); ++i) index_[params_[i].impl()] = i;
  seen_.assign(params_.size(), 0);
}

void DataParallel::add_grad(size_t i, bool first) {
  float* s = sum_.data() + offsets_[i];
  const size_t n = offsets_[i + 1] - offsets_[i];
  const Tensor g = params_[i].grad();
  if (first) has_grad_[i] = 0;
  if (!g.defined()) {
    if (first) std::memset(s, 0, n * sizeof(float));
    return;
  }
  has_grad_[i] = 1;
  const Tensor c = g.contiguous();
  const float* x = c.data<float>();
  if (first)
    std::memcpy(s, x, n * sizeof(float));
  else
    for (size_t j = 0; j < n; ++j) s[j] += x[j];
}

void DataParallel::launch(size_t b) {
  const Bucket& k = buckets_[b];
  in_flight_.push_back(comm_.start_all_reduce(sum_.data() + offsets_[k.first], offsets_[k.last] - offsets_[k.first]));
}

// Every rank launches the buckets in the same order (the order their last gradients complete, the same graph on
// every rank), as MPI requires of collectives.
void DataParallel::backward_overlapped(const Tensor& loss, bool first) {
  std::fill(seen_.begin(), seen_.end(), 0);
  for (Bucket& b : buckets_) {
    b.waiting = 0;
    for (size_t i = b.first; i < b.last; ++i) b.waiting += uses_[i] > 0;
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (uses_[i] == 0) add_grad(i, first);
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].waiting == 0) launch(b);
  set_leaf_grad_hook([&](const TensorImpl* leaf) {
    const auto it = index_.find(leaf);
    if (it == index_.end()) return;
    const size_t i = it->second;
    ENG_CHECK(++seen_[i] <= uses_[i], "train: --reduce fast: parameter ", i, " received more gradients than on the "
              "first step (", uses_[i], "): its graph changed; use --reduce exact");
    if (seen_[i] == uses_[i]) {
      add_grad(i, first);
      if (--buckets_[bucket_of_[i]].waiting == 0) launch(bucket_of_[i]);
    }
    for (auto& r : in_flight_) r->test();
  });
  try {
    loss.backward();
  } catch (...) {
    set_leaf_grad_hook(nullptr);
    throw;
  }
  set_leaf_grad_hook(nullptr);
  for (size_t i = 0; i < params_.size(); ++i)
    ENG_CHECK(seen_[i] == uses_[i], "train: --reduce fast: parameter ", i, " received ", seen_[i], " gradients, ",
              uses_[i], " on the first step: its graph changed; use --reduce exact");
  Timed timed(comm_seconds_);
  for (auto& r : in_flight_) r->wait();
  in_flight_.clear();
}

void DataParallel::shard_gradients() {
  sharded_ = true;
  slices_ = even_slices(sum_.size(), comm_.size());
}

void DataParallel::reduce(bool reduced) {
  if (comm_.size() == 1) return;
  Timed timed(comm_seconds_);
  std::vector<unsigned char> all(has_grad_.size() * size_t(comm_.size()));
  comm_.all_gather_bytes(has_grad_.data(), has_grad_.size(), all.data());
  for (size_t r = 1; r < size_t(comm_.size()); ++r)
    for (size_t i = 0; i < has_grad_.size(); ++i) has_grad_[i] |= all[r * has_grad_.size() + i];
  if (reduced) return;
  if (!sharded_ || order_ == ReduceOrder::Fast) {
    comm_.all_reduce_sum(sum_.data(), sum_.size(), order_);
    return;
  }
  const size_t lo = slices_[size_t(comm_.rank())], hi = slices_[size_t(comm_.rank()) + 1];
  std::vector<float> mine(hi - lo);
  comm_.reduce_scatter_sum(sum_.data(), mine.data(), slices_);
  std::copy(mine.begin(), mine.end(), sum_.begin() + int64_t(lo));
}

double DataParallel::finish(double max_norm) {
  const size_t lo = sharded_ ? slices_[size_t(comm_.rank())] : 0, hi = sharded_ ? slices_[size_t(comm_.rank()) + 1]
                                                                                : sum_.size();
  ExactSquares squares;
  squares.add(sum_.data() + lo, hi - lo);
  if (sharded_ && comm_.size() > 1) {
    std::vector<ExactSquares> all(size_t(comm_.size()));
    {
      Timed timed(comm_seconds_);
      comm_.all_gather_bytes(&squares, sizeof squares, all.data());
    }
    squares = ExactSquares();
    for (const ExactSquares& part : all) squares.merge(part);
  }
  const double norm = std::sqrt(squares.value());
  if (std::isfinite(norm) && norm > max_norm) {
    const double c = max_norm / (norm + 1e-6);
    for (size_t j = lo; j < hi; ++j) sum_[j] = float(double(sum_[j]) * c);
  }
  if (sharded_) return norm;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!has_grad_[i]) {
      params_[i].zero_grad();
      continue;
    }
    Tensor g = empty(params_[i].shape(), DType::F32);
    std::memcpy(g.data<float>(), sum_.data() + offsets_[i], (offsets_[i + 1] - offsets_[i]) * sizeof(float));
    params_[i].set_grad(g);
  }
  return norm;
}

StepTotals DataParallel::forward_backward(Job& job, Rng& data, int64_t batch) {
  StepStart start(job, data, accum_);
  const int64_t K = micro_batches();
  const bool overlap = order_ == ReduceOrder::Fast && comm_.size() > 1 && !uses_.empty();
  constexpr size_t kFields = 6;  // loss, correct, counted, tokens, edits, labels of one micro-batch
  std::vector<double> mine(size_t(accum_) * kFields);
  for (int64_t m = 0; m < accum_; ++m) {
    const int64_t k = comm_.rank() * accum_ + m;
    for (Tensor& p : params_) p.zero_grad();
    const StepResult r = start.run(k * batch, batch);
    Tensor loss = r.penalty.defined() ? add(r.loss, r.penalty) : r.loss;
    loss = mul_scalar(loss, 1.0 / double(K));
    const bool last = m + 1 == accum_;
    if (last && overlap) {
      backward_overlapped(loss, m == 0);
    } else {
      if (last && order_ == ReduceOrder::Fast && uses_.empty()) {  // the first step: count each parameter's uses
        set_leaf_grad_hook([&](const TensorImpl* leaf) {
          const auto it = index_.find(leaf);
          if (it != index_.end()) ++seen_[it->second];
        });
      }
      loss.backward();
      set_leaf_grad_hook(nullptr);
      for (size_t i = 0; i < params_.size(); ++i) add_grad(i, m == 0);
    }
    double* f = mine.data() + size_t(m) * kFields;
    f[0] = r.loss.item();
    f[1] = double(r.correct), f[2] = double(r.counted), f[3] = double(r.tokens), f[4] = double(r.edits),
    f[5] = double(r.labels);
  }
  data.set_position(data.position() + 1);
  if (order_ == ReduceOrder::Fast && uses_.empty()) uses_ = seen_;
  if (sharded_)  // the shard reads sums(): the whole gradients need not outlive backward
    for (Tensor& p : params_) p.zero_grad();
  reduce(overlap);
  std::vector<double> all(mine.size() * size_t(comm_.size()));
  {
    Timed timed(comm_seconds_);
    comm_.all_gather_bytes(mine.data(), mine.size() * sizeof(double), all.data());
  }
  StepTotals t;
  for (int64_t k = 0; k < K; ++k) {
    const double* f = all.data() + size_t(k) * kFields;
    t.loss += f[0] / double(K);
    t.counts.correct += int64_t(f[1]), t.counts.counted += int64_t(f[2]), t.counts.tokens += int64_t(f[3]);
    t.counts.edits += int64_t(f[4]), t.counts.labels += int64_t(f[5]);
  }
  return t;
}

size_t DataParallel::bytes_per_step() const {
  const size_t n = size_t(comm_.size());
  const size_t halves = sharded_ && order_ == ReduceOrder::Exact ? 1 : 2;  // reduce-scatter (+ all-gather)
  return n == 1 ? 0 : halves * (n - 1) * sum_.size() * sizeof(float) / n;
}

}  // namespace eng::jobs
