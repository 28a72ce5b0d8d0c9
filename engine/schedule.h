// Learning-rate schedules: pure functions of the number of completed optimizer steps, so a resumed
// run needs nothing but the step count (Optimizer::steps()). Use before each step:
//   opt.set_lr(schedule->lr(opt.steps())); opt.step();
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace eng {

struct Schedule {
  virtual ~Schedule() = default;
  // The learning rate of the update made after `step` completed updates (step >= 0).
  virtual double lr(int64_t step) const = 0;
};

class ConstantSchedule : public Schedule {
 public:
  explicit ConstantSchedule(double lr);
  double lr(int64_t step) const override;

 private:
  double lr_;
};

// lr until the first milestone; from step s of each (s, value) on, value. Milestone steps are >= 0
// and strictly increasing.
class StepSchedule : public Schedule {
 public:
  StepSchedule(double lr, std::vector<std::pair<int64_t, double>> milestones);
  double lr(int64_t step) const override;

 private:
  double lr_;
  std::vector<std::pair<int64_t, double>> milestones_;
};

// Linear warmup from 0 (at step 0) to peak_lr (at warmup_steps), then half a cosine down to min_lr
// at total_steps, and min_lr after. Needs 0 <= warmup_steps <= total_steps, total_steps > 0,
// 0 <= min_lr <= peak_lr.
class WarmupCosineSchedule : public Schedule {
 public:
  WarmupCosineSchedule(double peak_lr, int64_t warmup_steps, int64_t total_steps, double min_lr = 0);
  double lr(int64_t step) const override;

 private:
  double peak_, min_;
  int64_t warmup_, total_;
};

// A schedule from a command-line spec, with `lr` as the base (constant, step) or peak (cosine) rate:
//   "constant"
//   "step:3000=1e-4,6000=1e-5"                  lr, then 1e-4 from step 3000, 1e-5 from 6000
//   "cosine:warmup=100,total=5000,min=1e-5"     warmup and min are optional (default 0)
// A bad spec throws an Error that quotes it and shows the expected forms.
std::unique_ptr<Schedule> parse_schedule(const std::string& spec, double lr);

}  // namespace eng
