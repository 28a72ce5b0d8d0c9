#include <doctest/doctest.h>

#include <cmath>

#include "engine/error.h"
#include "engine/schedule.h"

using namespace eng;

namespace {

const char* const kExpected =
    "; expected \"constant\", \"step:STEP=LR[,STEP=LR...]\" or \"cosine:[warmup=STEPS,]total=STEPS[,min=LR]\"";

std::string bad(const std::string& spec, const std::string& why) {
  return "parse_schedule: bad schedule \"" + spec + "\": " + why + kExpected;
}

}  // namespace

TEST_CASE("schedule: constant") {
  ConstantSchedule s(3e-4);
  CHECK(s.lr(0) == 3e-4);
  CHECK(s.lr(1000000) == 3e-4);
  CHECK_THROWS_WITH(s.lr(-1), "ConstantSchedule: step must be >= 0, got -1");
  CHECK_THROWS_WITH(ConstantSchedule(-1), "ConstantSchedule: lr must be finite and >= 0, got -1");
}

TEST_CASE("schedule: step milestones") {
  StepSchedule copy_task(1e-3, {{3000, 1e-4}});
  CHECK(copy_task.lr(0) == 1e-3);
  CHECK(copy_task.lr(2999) == 1e-3);
  CHECK(copy_task.lr(3000) == 1e-4);
  CHECK(copy_task.lr(100000) == 1e-4);
  StepSchedule two(1, {{10, 0.5}, {20, 0.25}});
  CHECK(two.lr(9) == 1);
  CHECK(two.lr(10) == 0.5);
  CHECK(two.lr(19) == 0.5);
  CHECK(two.lr(20) == 0.25);
  CHECK(StepSchedule(2, {}).lr(5) == 2);
  CHECK_THROWS_WITH(StepSchedule(1, {{20, 0.5}, {10, 0.25}}),
                    "StepSchedule: milestone steps must increase, got 20 then 10");
  CHECK_THROWS_WITH(StepSchedule(1, {{10, 0.5}, {10, 0.25}}),
                    "StepSchedule: milestone steps must increase, got 10 then 10");
  CHECK_THROWS_WITH(StepSchedule(1, {{-1, 0.5}}), "StepSchedule: milestone step must be >= 0, got -1");
  CHECK_THROWS_WITH(StepSchedule(1, {{5, -0.5}}), "StepSchedule: milestone lr must be finite and >= 0, got -0.5");
}

TEST_CASE("schedule: warmup then cosine") {
  WarmupCosineSchedule s(1.0, 10, 110, 0.1);
  CHECK(s.lr(0) == 0);
  CHECK(s.lr(5) == doctest::Approx(0.5).epsilon(1e-15));   // 1.0 * 5 / 10
  CHECK(s.lr(10) == doctest::Approx(1.0).epsilon(1e-15));  // the peak: cos(0) = 1
  // step 35: progress (35 - 10) / 100 = 0.25; 0.1 + 0.9 * 0.5 * (1 + cos(pi / 4)) = 0.1 + 0.45 * 1.707106781187
  CHECK(s.lr(35) == doctest::Approx(0.1 + 0.45 * (1 + std::sqrt(0.5))).epsilon(1e-14));
  // step 60: progress 0.5, cos(pi / 2) = 0: halfway between peak and min
  CHECK(s.lr(60) == doctest::Approx(0.55).epsilon(1e-14));
  CHECK(s.lr(109) == doctest::Approx(0.1 + 0.45 * (1 + std::cos(std::acos(-1.0) * 0.99))).epsilon(1e-14));
  CHECK(s.lr(110) == 0.1);
  CHECK(s.lr(5000) == 0.1);
  WarmupCosineSchedule no_warmup(2.0, 0, 4);
  CHECK(no_warmup.lr(0) == 2.0);
  CHECK(no_warmup.lr(2) == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(no_warmup.lr(4) == 0);
  CHECK_THROWS_WITH(s.lr(-3), "WarmupCosineSchedule: step must be >= 0, got -3");
  CHECK_THROWS_WITH(WarmupCosineSchedule(1, 20, 10),
                    "WarmupCosineSchedule: warmup_steps must be in [0, 10] (total_steps), got 20");
  CHECK_THROWS_WITH(WarmupCosineSchedule(1, 0, 0), "WarmupCosineSchedule: total_steps must be > 0, got 0");
  CHECK_THROWS_WITH(WarmupCosineSchedule(0.1, 0, 10, 0.2), "WarmupCosineSchedule: min_lr 0.2 exceeds peak_lr 0.1");
}

TEST_CASE("schedule: parse_schedule builds the schedule a spec names") {
  auto c = parse_schedule("constant", 1e-3);
  CHECK(c->lr(0) == 1e-3);
  CHECK(c->lr(99999) == 1e-3);
  auto s = parse_schedule("step:3000=1e-4,6000=1e-5", 1e-3);
  CHECK(s->lr(2999) == 1e-3);
  CHECK(s->lr(3000) == 1e-4);
  CHECK(s->lr(5999) == 1e-4);
  CHECK(s->lr(6000) == 1e-5);
  auto cos = parse_schedule("cosine:warmup=100,total=5000,min=1e-5", 1e-3);
  CHECK(cos->lr(50) == doctest::Approx(5e-4).epsilon(1e-14));
  CHECK(cos->lr(100) == doctest::Approx(1e-3).epsilon(1e-14));
  CHECK(cos->lr(2550) == doctest::Approx(1e-5 + 0.5 * (1e-3 - 1e-5)).epsilon(1e-14));
  CHECK(cos->lr(5000) == 1e-5);
  auto bare = parse_schedule("cosine:total=10", 1.0);  // no warmup, min 0
  CHECK(bare->lr(0) == 1.0);
  CHECK(bare->lr(10) == 0);
}

TEST_CASE("schedule: parse errors quote the spec and show the expected forms") {
  CHECK_THROWS_WITH(parse_schedule("", 1e-3), bad("", "unknown kind \"\"").c_str());
  CHECK_THROWS_WITH(parse_schedule("linear", 1e-3), bad("linear", "unknown kind \"linear\"").c_str());
  CHECK_THROWS_WITH(parse_schedule("constant:1", 1e-3), bad("constant:1", "\"constant\" takes no arguments").c_str());
  CHECK_THROWS_WITH(parse_schedule("step", 1e-3), bad("step", "no milestones").c_str());
  CHECK_THROWS_WITH(parse_schedule("step:", 1e-3), bad("step:", "no milestones").c_str());
  CHECK_THROWS_WITH(parse_schedule("step:3000", 1e-3), bad("step:3000", "\"3000\" is not STEP=LR").c_str());
  CHECK_THROWS_WITH(parse_schedule("step:3000=1e-4,", 1e-3),
                    bad("step:3000=1e-4,", "\"\" is not STEP=LR").c_str());
  CHECK_THROWS_WITH(parse_schedule("step:abc=1e-4", 1e-3),
                    bad("step:abc=1e-4", "\"abc\" is not a step count").c_str());
  CHECK_THROWS_WITH(parse_schedule("step:-5=1e-4", 1e-3), bad("step:-5=1e-4", "\"-5\" is not a step count").c_str());
  CHECK_THROWS_WITH(parse_schedule("step:3000=fast", 1e-3),
                    bad("step:3000=fast", "\"fast\" is not a learning rate").c_str());
  CHECK_THROWS_WITH(parse_schedule("step:3000=1e-4x", 1e-3),
                    bad("step:3000=1e-4x", "\"1e-4x\" is not a learning rate").c_str());
  CHECK_THROWS_WITH(parse_schedule("step:6000=1e-4,3000=1e-5", 1e-3),
                    bad("step:6000=1e-4,3000=1e-5", "StepSchedule: milestone steps must increase, got 6000 then 3000")
                        .c_str());
  CHECK_THROWS_WITH(parse_schedule("cosine", 1e-3), bad("cosine", "missing total").c_str());
  CHECK_THROWS_WITH(parse_schedule("cosine:warmup=10", 1e-3), bad("cosine:warmup=10", "missing total").c_str());
  CHECK_THROWS_WITH(parse_schedule("cosine:total=100,foo=1", 1e-3),
                    bad("cosine:total=100,foo=1", "unknown key \"foo\"").c_str());
  CHECK_THROWS_WITH(parse_schedule("cosine:total=100,total=200", 1e-3),
                    bad("cosine:total=100,total=200", "\"total\" given twice").c_str());
  CHECK_THROWS_WITH(parse_schedule("cosine:total", 1e-3), bad("cosine:total", "\"total\" is not KEY=VALUE").c_str());
  CHECK_THROWS_WITH(parse_schedule("cosine:total=1e3", 1e-3),
                    bad("cosine:total=1e3", "total \"1e3\" is not a step count").c_str());
  CHECK_THROWS_WITH(parse_schedule("cosine:warmup=x,total=10", 1e-3),
                    bad("cosine:warmup=x,total=10", "warmup \"x\" is not a step count").c_str());
  CHECK_THROWS_WITH(parse_schedule("cosine:total=10,min=low", 1e-3),
                    bad("cosine:total=10,min=low", "min \"low\" is not a learning rate").c_str());
  CHECK_THROWS_WITH(
      parse_schedule("cosine:warmup=200,total=100", 1e-3),
      bad("cosine:warmup=200,total=100", "WarmupCosineSchedule: warmup_steps must be in [0, 100] (total_steps), got 200")
          .c_str());
  CHECK_THROWS_WITH(parse_schedule("cosine:total=100,min=2e-3", 1e-3),
                    bad("cosine:total=100,min=2e-3", "WarmupCosineSchedule: min_lr 0.002 exceeds peak_lr 0.001").c_str());
  // One literal copy of a whole message, so the helper above cannot drift from the real text.
  CHECK_THROWS_WITH(parse_schedule("step:x=1", 0.1),
                    "parse_schedule: bad schedule \"step:x=1\": \"x\" is not a step count; expected \"constant\", "
                    "\"step:STEP=LR[,STEP=LR...]\" or \"cosine:[warmup=STEPS,]total=STEPS[,min=LR]\"");
}
