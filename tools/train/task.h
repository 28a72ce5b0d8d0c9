// The tasks of build/train register themselves here, one file per family in tools/train/, as bench subcommands
// do (tools/bench.h). A task brings its name, a help line, its own flags (declared on the run's Cli) and, once
// they are parsed, its plan: the model it completes, the checkpoint keys it writes and compares on resume, and
// the job that trains it (job.h). tools/train.cpp names no task; its usage, its errors and its checks read this
// registry.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/cli.h"
#include "models/transformer.h"
#include "tools/train/job.h"
#include "tools/train/run_files.h"

namespace eng::jobs {

// What the common flags decided, for the task to complete.
struct TaskInput {
  TransformerConfig model;  // width, heads, attention, norms, seed...; vocab, layers and max_len are the task's
  int64_t layers = 0;       // --layers: the depth of the task's model
  bool resuming = false;    // --resume was given
};

// What a task makes of its parsed flags.
struct TaskPlan {
  explicit TaskPlan(TransformerConfig common) : model(std::move(common)) {}
  TransformerConfig model;  // complete: vocab, encoder and decoder layers, max_len (and mem_len, outputs) set
  // Per sequence of a micro-batch, for the memory estimate: positions (tokens or frames), and floats of input
  // data per position (0 for token ids).
  int64_t positions = 0, input_features = 0;
  // The task's checkpoint keys besides its name, written as "task.<key>" and compared on resume.
  std::map<std::string, std::string> keys;
  // Builds the job (loads what it needs); called once the run is known to fit in memory.
  std::function<std::unique_ptr<Job>()> make_job;
};

// A task's flags: the constructor declares them on the run's Cli, the members read them once it has parsed.
class TaskFlags {
 public:
  virtual ~TaskFlags() = default;
  // Files the task reads and writes, by flag ("data", "samples"), checked with the run's own before any data is
  // loaded (run_files.h).
  virtual std::vector<FlagPath> inputs() const { return {}; }
  virtual std::vector<FlagPath> outputs() const { return {}; }
  virtual TaskPlan plan(const TaskInput& in) const = 0;
};

struct TaskInfo {
  std::string name, help;
  bool cuda = false;  // --device cuda can train it (docs/cuda.md)
  std::function<std::unique_ptr<TaskFlags>(Cli&)> declare;
};

bool register_task(TaskInfo task);
const std::map<std::string, TaskInfo>& registered_tasks();  // by name
// The task called `name`; an unknown name is an error listing the tasks.
const TaskInfo& find_task(const std::string& name);
// The names of the tasks `pick` accepts (all by default), in order.
std::vector<std::string> task_names(const std::function<bool(const TaskInfo&)>& pick = nullptr);
// "copy, reverse or sort": `names` joined by commas, with `last` (" or ", " and ") before the last.
std::string join_names(const std::vector<std::string>& names, const std::string& last);

}  // namespace eng::jobs

#define ENG_TASK_CONCAT2(a, b) a##b
#define ENG_TASK_CONCAT(a, b) ENG_TASK_CONCAT2(a, b)
#define ENG_REGISTER_TASK(...) \
  static const bool ENG_TASK_CONCAT(eng_task_registered_, __LINE__) = ::eng::jobs::register_task({__VA_ARGS__})
