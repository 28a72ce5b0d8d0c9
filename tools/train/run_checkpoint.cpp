#include "tools/train/run_checkpoint.h"

#include "engine/error.h"
#include "engine/parse_number.h"

namespace eng::jobs {

void save_run_checkpoint(const std::string& path, Job& job, const Optimizer& optimizer, const RunConfig& config,
                         int64_t step, const Rng& data) {
  std::map<std::string, std::string> meta = run_config_metadata(config);
  meta["step"] = std::to_string(step);
  meta["data_rng_position"] = std::to_string(data.position());
  meta["model_rng_position"] = std::to_string(job.model_rng().position());
  save_checkpoint(path, job.model(), &optimizer, meta);
}

int64_t resume_run(const std::string& path, Job& job, Optimizer& optimizer, const RunConfig& config, Rng& data,
                   int64_t steps) {
  const auto meta = load_checkpoint(path, job.model(), &optimizer);
  check_checkpoint_task(path, meta, config.task);
  check_checkpoint_config(path, meta, config.model);
  auto number = [&](const char* key) -> uint64_t {
    auto it = meta.find(key);
    ENG_CHECK(it != meta.end(), "train: checkpoint ", path, ": metadata '", key, "' is missing");
    return uint64_t(parse_int(it->second, IntRange::at_least(0), "train: checkpoint " + path + ": " + key));
  };
  const int64_t step = int64_t(number("step"));
  data.set_position(number("data_rng_position"));
  job.model_rng().set_position(number("model_rng_position"));
  ENG_CHECK(step < steps, "train: checkpoint ", path, " is at step ", step, ", not before --steps ", steps,
            ": nothing is left to train (raise --steps to train further)");
  return step;
}

}  // namespace eng::jobs
