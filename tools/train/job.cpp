#include "tools/train/job.h"

#include "ops/loss.h"
#include "ops/reduce.h"
#include "ops/view.h"

namespace eng::jobs {

void count_correct(const Tensor& logits, const Tensor& targets, StepResult& r) {
  Tensor pred = argmax(logits.detach(), -1);
  const int64_t* p = pred.data<int64_t>();
  const int64_t* t = targets.data<int64_t>();
  for (int64_t i = 0, n = targets.numel(); i < n; ++i) {
    if (t[i] == kIgnore) continue;
    r.counted++;
    r.correct += p[i] == t[i];
  }
}

Tensor token_loss(const Tensor& logits, const Tensor& targets) {
  return cross_entropy(reshape(logits, {-1, logits.size(-1)}), reshape(targets, {-1}), kIgnore);
}

}  // namespace eng::jobs
