#include "engine/schedule.h"

#include <cctype>
#include <cmath>
#include <map>

#include "engine/error.h"
#include "engine/parse_number.h"

namespace eng {
namespace {

void check_rate(const char* who, const char* what, double v) {
  ENG_CHECK(std::isfinite(v) && v >= 0, who, ": ", what, " must be finite and >= 0, got ", v);
}

void check_step(const char* who, int64_t step) { ENG_CHECK(step >= 0, who, ": step must be >= 0, got ", step); }

constexpr double kPi = 3.14159265358979323846;

constexpr const char* kExpected =
    "expected \"constant\", \"step:STEP=LR[,STEP=LR...]\" or \"cosine:[warmup=STEPS,]total=STEPS[,min=LR]\"";

[[noreturn]] void bad_spec(const std::string& spec, const std::string& why) {
  fail("parse_schedule: bad schedule \"", spec, "\": ", why, "; ", kExpected);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

// Whole-string numbers (engine/parse_number.h): "3000" is a step, "1e-4" a rate; signs on a step, spaces and
// trailing text are not. False lets the caller restate the problem against the whole spec.
bool parse_steps(const std::string& s, int64_t& out) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  try {
    out = parse_int(s, IntRange::at_least(0), "steps");
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool parse_rate(const std::string& s, double& out) {
  try {
    out = parse_real(s, RealRange{}, "rate");
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Builds the schedule, restating a constructor's complaint (say, decreasing milestones) against the spec.
template <class S, class... Args>
std::unique_ptr<Schedule> build(const std::string& spec, Args&&... args) {
  try {
    return std::make_unique<S>(std::forward<Args>(args)...);
  } catch (const Error& e) {
    bad_spec(spec, e.what());
  }
}

std::pair<std::string, std::string> split_pair(const std::string& spec, const std::string& item, const char* form) {
  size_t eq = item.find('=');
  if (eq == std::string::npos) bad_spec(spec, "\"" + item + "\" is not " + form);
  return {item.substr(0, eq), item.substr(eq + 1)};
}

std::unique_ptr<Schedule> parse_step(const std::string& spec, const std::string& args, double lr) {
  if (args.empty()) bad_spec(spec, "no milestones");
  std::vector<std::pair<int64_t, double>> milestones;
  for (const std::string& item : split(args, ',')) {
    auto [k, v] = split_pair(spec, item, "STEP=LR");
    int64_t s = 0;
    double r = 0;
    if (!parse_steps(k, s)) bad_spec(spec, "\"" + k + "\" is not a step count");
    if (!parse_rate(v, r)) bad_spec(spec, "\"" + v + "\" is not a learning rate");
    milestones.emplace_back(s, r);
  }
  return build<StepSchedule>(spec, lr, std::move(milestones));
}

std::unique_ptr<Schedule> parse_cosine(const std::string& spec, const std::string& args, double lr) {
  std::map<std::string, std::string> kv;
  if (!args.empty())
    for (const std::string& item : split(args, ',')) {
      auto [k, v] = split_pair(spec, item, "KEY=VALUE");
      if (k != "warmup" && k != "total" && k != "min") bad_spec(spec, "unknown key \"" + k + "\"");
      if (!kv.emplace(k, v).second) bad_spec(spec, "\"" + k + "\" given twice");
    }
  if (!kv.count("total")) bad_spec(spec, "missing total");
  int64_t warmup = 0, total = 0;
  double min_lr = 0;
  if (kv.count("warmup") && !parse_steps(kv["warmup"], warmup))
    bad_spec(spec, "warmup \"" + kv["warmup"] + "\" is not a step count");
  if (!parse_steps(kv["total"], total)) bad_spec(spec, "total \"" + kv["total"] + "\" is not a step count");
  if (kv.count("min") && !parse_rate(kv["min"], min_lr)) bad_spec(spec, "min \"" + kv["min"] + "\" is not a learning rate");
  return build<WarmupCosineSchedule>(spec, lr, warmup, total, min_lr);
}

}  // namespace

ConstantSchedule::ConstantSchedule(double lr) : lr_(lr) { check_rate("ConstantSchedule", "lr", lr); }

double ConstantSchedule::lr(int64_t step) const {
  check_step("ConstantSchedule", step);
  return lr_;
}

StepSchedule::StepSchedule(double lr, std::vector<std::pair<int64_t, double>> milestones)
    : lr_(lr), milestones_(std::move(milestones)) {
  check_rate("StepSchedule", "lr", lr);
  for (size_t i = 0; i < milestones_.size(); ++i) {
    const auto& [s, v] = milestones_[i];
    ENG_CHECK(s >= 0, "StepSchedule: milestone step must be >= 0, got ", s);
    ENG_CHECK(i == 0 || s > milestones_[i - 1].first, "StepSchedule: milestone steps must increase, got ",
              milestones_[i - 1].first, " then ", s);
    check_rate("StepSchedule", "milestone lr", v);
  }
}

double StepSchedule::lr(int64_t step) const {
  check_step("StepSchedule", step);
  double r = lr_;
  for (const auto& [s, v] : milestones_)
    if (step >= s) r = v;
  return r;
}

WarmupCosineSchedule::WarmupCosineSchedule(double peak_lr, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : peak_(peak_lr), min_(min_lr), warmup_(warmup_steps), total_(total_steps) {
  check_rate("WarmupCosineSchedule", "peak_lr", peak_lr);
  check_rate("WarmupCosineSchedule", "min_lr", min_lr);
  ENG_CHECK(min_lr <= peak_lr, "WarmupCosineSchedule: min_lr ", min_lr, " exceeds peak_lr ", peak_lr);
  ENG_CHECK(total_steps > 0, "WarmupCosineSchedule: total_steps must be > 0, got ", total_steps);
  ENG_CHECK(warmup_steps >= 0 && warmup_steps <= total_steps, "WarmupCosineSchedule: warmup_steps must be in [0, ",
            total_steps, "] (total_steps), got ", warmup_steps);
}

double WarmupCosineSchedule::lr(int64_t step) const {
  check_step("WarmupCosineSchedule", step);
  if (step < warmup_) return peak_ * double(step) / double(warmup_);
  if (step >= total_) return min_;
  const double progress = double(step - warmup_) / double(total_ - warmup_);
  return min_ + (peak_ - min_) * 0.5 * (1 + std::cos(kPi * progress));
}

std::unique_ptr<Schedule> parse_schedule(const std::string& spec, double lr) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string args = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "constant") {
    if (colon != std::string::npos) bad_spec(spec, "\"constant\" takes no arguments");
    return build<ConstantSchedule>(spec, lr);
  }
  if (kind == "step") return parse_step(spec, args, lr);
  if (kind == "cosine") return parse_cosine(spec, args, lr);
  bad_spec(spec, "unknown kind \"" + kind + "\"");
}

}  // namespace eng
