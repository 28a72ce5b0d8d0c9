#include "tools/train/training_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace eng::jobs {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

TrainingLog::TrainingLog(const std::string& csv_path, bool label_errors, int64_t start, int64_t steps)
    : progress_(start, steps), label_errors_(label_errors) {
  if (csv_path.empty()) return;
  csv_ = std::make_unique<CsvLog>(csv_path, std::string("step,kind,loss,accuracy,lr,tokens_per_s,elapsed_s,grad_norm") +
                                                (label_errors ? ",label_error_rate" : ""),
                                  start);
  elapsed_before_ = csv_->elapsed_before();
}

void TrainingLog::count(const StepResult& r) {
  correct_ += r.correct;
  counted_ += r.counted;
  tokens_ += r.tokens;
  edits_ += r.edits;
  labels_ += r.labels;
}

void TrainingLog::applied(double step_loss) {
  loss_ += step_loss;
  ++steps_;
}

std::string TrainingLog::label_error_field(int64_t edits, int64_t labels) const {
  return !label_errors_ ? "" : labels ? "," + exact_decimal(double(edits) / double(labels)) : ",";
}

void TrainingLog::train_row(int64_t step, double lr, double grad_norm) {
  const double now = progress_.elapsed_seconds();
  const double tps = double(tokens_) / std::max(now - start_, 1e-9);
  const double l = steps_ ? loss_ / double(steps_) : NAN;
  const double acc = counted_ ? double(correct_) / double(counted_) : 0;
  const std::string label_errors = labels_ ? " | LER " + fmt("%.1f%%", 100.0 * double(edits_) / double(labels_)) : "";
  progress_.update(step, "loss " + fmt("%.4f", l) + " | acc " + fmt("%.1f%%", 100 * acc) + label_errors +
                             " | gnorm " + fmt("%.3g", grad_norm) + " | " + fmt("%.0f", tps) + " tok/s");
  if (csv_)
    csv_->row(std::to_string(step) + ",train," + exact_decimal(l) + "," + exact_decimal(acc) + "," +
              exact_decimal(lr) + "," + exact_decimal(tps) + "," + exact_decimal(elapsed_before_ + now) + "," +
              exact_decimal(grad_norm) + label_error_field(edits_, labels_));
  loss_ = 0;
  correct_ = counted_ = tokens_ = steps_ = edits_ = labels_ = 0;
  start_ = now;
}

void TrainingLog::eval_row(int64_t step, const Eval& e, const Job& job, double lr) {
  print("eval @ " + std::to_string(step) + ": " + eval_figures(e, job));
  if (csv_)
    csv_->row(std::to_string(step) + ",eval," + exact_decimal(e.loss) + "," + exact_decimal(e.accuracy) + "," +
              exact_decimal(lr) + ",," + exact_decimal(elapsed_before_ + progress_.elapsed_seconds()) + "," +
              label_error_field(e.edits, e.labels));
}

void TrainingLog::print(const std::string& line) {
  progress_.finish();
  std::printf("%s\n", line.c_str());
}

}  // namespace eng::jobs
