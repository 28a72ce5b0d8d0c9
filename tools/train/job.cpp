#include "tools/train/job.h"

#include <sstream>

#include "engine/error.h"
#include "ops/loss.h"
#include "ops/reduce.h"
#include "ops/view.h"

namespace eng::jobs {

StepStart::StepStart(Job& job, const Rng& data, int64_t micro_batches)
    : job_(job), data_(data), model_(job.model_rng()) {
  if (micro_batches > 1)
    for (const auto& nb : job.model().named_buffers()) buffers_.push_back(nb.second.clone());
}

StepResult StepStart::run(int64_t first_row, int64_t batch) {
  if (started_) {
    job_.model_rng() = model_;
    const auto buffers = job_.model().named_buffers();
    ENG_CHECK(buffers.size() == buffers_.size(), "train: a micro-batch after the first of a step needs the step's "
              "buffers restored (StepStart made for one micro-batch)");
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].second.copy_from(buffers_[i]);
  }
  started_ = true;
  return job_.run(data_, first_row, batch);
}

void count_correct(const Tensor& logits, const Tensor& targets, StepResult& r) {
  Tensor pred = argmax(to_device(logits.detach(), Device::CPU), -1);
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

StepResult score_logits(const LanguageModel& model, const Tensor& logits, const LMBatch& b) {
  StepResult r;
  r.loss = token_loss(logits, b.targets);
  r.tokens = b.inputs.numel();
  count_correct(logits, b.targets, r);
  if (model.training()) r.penalty = model.attention_penalty();
  return r;
}

std::string exact_decimal(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

}  // namespace eng::jobs
