// The checkpoints of a training run: beside the model's and the optimizer's tensors (models/checkpoint.h), train
// records its configuration (the model's keys as "config.<key>", the task's as "task.<key>": RunConfig), the step
// reached and the positions of the data and model generators, so that a resumed run repeats the uninterrupted one
// bit for bit (same flags, same threads). docs/checkpoint.md lists the keys.
#pragma once
#include <cstdint>
#include <string>

#include "engine/optim.h"
#include "engine/rng.h"
#include "models/checkpoint.h"
#include "tools/train/job.h"

namespace eng::jobs {

void save_run_checkpoint(const std::string& path, Job& job, const Optimizer& optimizer, const RunConfig& config,
                         int64_t step, const Rng& data);

// Loads `path` into the job's model and the optimizer, refuses a checkpoint of another task or model (either form
// of RunConfig) or one with nothing left before `steps`, restores the generators (`data` and the model's) and
// returns the step it was written at.
int64_t resume_run(const std::string& path, Job& job, Optimizer& optimizer, const RunConfig& config, Rng& data,
                   int64_t steps);

}  // namespace eng::jobs
