// What build/train reports while it trains: the progress line and the CSV log (csv_log.h). A train row averages
// the window of steps since the previous one (loss over the steps whose update was applied; accuracy, tokens per
// second and label errors over every micro-batch); an eval row gives an evaluation's figures. docs/training.md
// lists the columns.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/progress.h"
#include "tools/train/csv_log.h"
#include "tools/train/evaluation.h"
#include "tools/train/job.h"

namespace eng::jobs {

class TrainingLog {
 public:
  // A log from step `start` (a resumed run's CSV continues, csv_log.h) to `steps`; no CSV file when `csv_path` is
  // empty. With `label_errors` the CSV has a label_error_rate column.
  TrainingLog(const std::string& csv_path, bool label_errors, int64_t start, int64_t steps);
  void count(const StepResult& r);    // a micro-batch, into the window
  void applied(double step_loss);     // a step whose update was applied, into the window
  void train_row(int64_t step, double lr, double grad_norm);  // the progress line and a CSV row; a new window
  void eval_row(int64_t step, const Eval& e, const Job& job, double lr);  // "eval @ step: ..." and a CSV row
  void print(const std::string& line);  // a line of its own, after the progress line
  double elapsed_seconds() const { return progress_.elapsed_seconds(); }

 private:
  std::string label_error_field(int64_t edits, int64_t labels) const;
  Progress progress_;
  std::unique_ptr<CsvLog> csv_;
  bool label_errors_;
  double elapsed_before_ = 0;  // a resumed run's time continues in its log
  double loss_ = 0, start_ = 0;
  int64_t steps_ = 0, correct_ = 0, counted_ = 0, tokens_ = 0, edits_ = 0, labels_ = 0;
};

}  // namespace eng::jobs
