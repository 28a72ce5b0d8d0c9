#include "tools/train/evaluation.h"

#include <cstdio>

#include "engine/autograd.h"

namespace eng::jobs {

Eval evaluate(Job& job, int64_t batches, int64_t batch, uint64_t seed) {
  NoGradGuard no_grad;
  job.model().eval();
  Rng data(seed);
  Eval e;
  int64_t correct = 0, counted = 0;
  for (int64_t i = 0; i < batches; ++i) {
    StepResult r = job.run(data, 0, batch);
    data.set_position(data.position() + 1);
    e.loss += r.loss.item() / double(batches);
    correct += r.correct;
    counted += r.counted;
    e.edits += r.edits;
    e.labels += r.labels;
  }
  e.accuracy = counted ? double(correct) / double(counted) : 0;
  e.extra = job.eval_extra(batch, data);
  job.model().train();
  return e;
}

std::string label_error_text(int64_t edits, int64_t labels) {
  if (labels == 0) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, ", label error rate %.2f%%", 100.0 * double(edits) / double(labels));
  return buf;
}

std::string eval_figures(const Eval& e, const Job& job) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "loss %.4f", e.loss);
  std::string s = buf + job.loss_in_units(e.loss);
  std::snprintf(buf, sizeof buf, ", accuracy %.2f%%", 100 * e.accuracy);
  return s + buf + label_error_text(e.edits, e.labels) + e.extra;
}

}  // namespace eng::jobs
