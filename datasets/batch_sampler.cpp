#include "datasets/batch_sampler.h"

#include <numeric>
#include <utility>

#include "engine/error.h"
#include "engine/rng.h"

namespace eng {

BatchSampler::BatchSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  // Rng::below draws from 32 bits, and each epoch's stream holds 2^40 words.
  ENG_CHECK(n >= 1 && n < (int64_t(1) << 32), "batch sampler: needs 1 to 2^32 - 1 examples, got ", n);
  shuffle();
}

void BatchSampler::shuffle() {
  order_.resize(size_t(n_));
  std::iota(order_.begin(), order_.end(), 0);
  Rng rng(seed_, uint64_t(epoch_) << 40);
  for (int64_t i = n_ - 1; i > 0; --i) std::swap(order_[size_t(i)], order_[rng.below(uint64_t(i + 1))]);
}

std::vector<int64_t> BatchSampler::next(int64_t batch) {
  ENG_CHECK(batch >= 1, "batch sampler: batch must be >= 1, got ", batch);
  std::vector<int64_t> out;
  out.reserve(size_t(batch));
  while (int64_t(out.size()) < batch) {
    if (cursor_ == n_) {
      ++epoch_;
      cursor_ = 0;
      shuffle();
    }
    out.push_back(order_[size_t(cursor_++)]);
  }
  return out;
}

void BatchSampler::set_state(int64_t epoch, int64_t cursor) {
  ENG_CHECK(epoch >= 0 && cursor >= 0 && cursor <= n_, "batch sampler: state (epoch ", epoch, ", cursor ", cursor,
            ") is invalid for ", n_, " examples");
  epoch_ = epoch;
  cursor_ = cursor;
  shuffle();
}

}  // namespace eng
