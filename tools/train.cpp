// train: trains a transformer on a task from the command line, with a progress line, a CSV log, periodic
// evaluation, checkpoints and bit-identical resume. `build/train TASK --help` lists the flags.
// This file is the run: parse, build the job, train, report. The tasks register themselves with their flags in
// tools/train/ (task.h), the flags every task takes are in tools/train/common_flags.h.
//   build/train copy --layers 4 --heads 8 --d-model 64 --seq-len 128 --optimizer radam --steps 6000
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <new>
#include <vector>

#include "engine/allocator.h"
#include "engine/anomaly.h"
#include "engine/autograd.h"
#include "engine/cli.h"
#include "engine/comm.h"
#include "engine/cuda.h"
#include "engine/error.h"
#include "engine/optim.h"
#include "engine/schedule.h"
#include "engine/threadpool.h"
#include "models/attention/attention.h"
#include "models/transformer.h"
#include "ops/binary.h"
#include "ops/mixed_precision.h"
#include "tools/train/common_flags.h"
#include "tools/train/data_parallel.h"
#include "tools/train/evaluation.h"
#include "tools/train/job.h"
#include "tools/train/memory_estimate.h"
#include "tools/train/init_weights.h"
#include "tools/train/nonfinite_checks.h"
#include "tools/train/optimizer_shard.h"
#include "tools/train/rank_agreement.h"
#include "tools/train/run_checkpoint.h"
#include "tools/train/run_files.h"
#include "tools/train/task.h"
#include "tools/train/training_log.h"
#include "tools/heap_pad.h"
#include "tools/tool_main.h"

using namespace eng;
using namespace eng::jobs;

namespace {

// The task of a command line that names none (--task's default).
constexpr const char* kDefaultTask = "copy";

// "the ctc task" or "the copy, reverse and sort tasks".
std::string task_list(const std::vector<std::string>& tasks) {
  return "the " + join_names(tasks, " and ") + (tasks.size() == 1 ? " task" : " tasks");
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, NamedTensors params, double lr, double wd) {
  if (name == "sgd") return std::make_unique<SGD>(std::move(params), lr, 0.9, wd);
  if (name == "adam") return std::make_unique<Adam>(std::move(params), lr, 0.9, 0.999, 1e-8, wd);
  if (name == "adamw") return std::make_unique<AdamW>(std::move(params), lr, 0.9, 0.999, 1e-8, wd);
  if (name == "radam") return std::make_unique<RAdam>(std::move(params), lr, 0.9, 0.999, 1e-8, wd);
  fail("train: --optimizer must be sgd, adam, adamw or radam, got '", name, "'");
}

// --device cuda is refused, saying why, unless the run stays on what dispatches to CUDA (docs/cuda.md): a CUDA
// build with a device, a task marked for CUDA (the character LM), an attention variant that declares a CUDA form
// (accepts().cuda: softmax's flash kernel, causal-linear's), positions added to the embeddings or none, and Adam or
// AdamW; no checkpoints yet (they are written from host memory).
void check_cuda_run(const TaskInfo& task, const TransformerConfig& c, const std::string& optimizer,
                    bool checkpoints) {
  ENG_CHECK(cuda::device_count() > 0, "train: --device cuda: ", cuda::unavailable_reason());
  ENG_CHECK(task.cuda, "train: --device cuda trains ", task_list(task_names([](const TaskInfo& t) { return t.cuda; })),
            " only, not '", task.name, "'");
  AttentionConfig ac;  // the variant as the model builds it, asked whether its forward has a CUDA form
  ac.heads = c.heads;
  ac.head_dim = c.d_model / c.heads;
  ac.max_len = c.max_len;
  ac.causal = true;
  ac.options = c.attention_options;
  ENG_CHECK(make_attention(c.attention, ac)->accepts().cuda, "train: --device cuda needs an attention variant with a "
            "CUDA form (docs/cuda.md), got '", c.attention, "'");
  ENG_CHECK(c.positional == PositionalKind::Sinusoidal || c.positional == PositionalKind::Learned ||
                c.positional == PositionalKind::None,
            "train: --device cuda needs --positional sinusoidal, learned or none, got ", positional_name(c.positional));
  ENG_CHECK(!c.reversible && c.mem_len == 0 && (c.kv_heads == 0 || c.kv_heads == c.heads),
            "train: --device cuda does not support --reversible, --mem-len or --kv-heads yet");
  ENG_CHECK(optimizer == "adam" || optimizer == "adamw", "train: --device cuda needs --optimizer adam or adamw, got '",
            optimizer, "'");
  ENG_CHECK(!checkpoints, "train: --device cuda does not write or resume checkpoints yet");
}

// ---- parse -------------------------------------------------------------------------------------

// The task a command line names: its first argument, or --task NAME anywhere, else the default. Read before the
// flags are parsed, since the task declares its own.
std::string task_named(int argc, char** argv) {
  if (argc > 1 && argv[1][0] != '-') return argv[1];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--task" && i + 1 < argc) return argv[i + 1];
    if (a.rfind("--task=", 0) == 0) return a.substr(7);
  }
  return kDefaultTask;
}

std::string summary() {
  std::string s = "Trains a transformer on a task; `train TASK --help` lists that task's flags after the common ones.";
  for (const auto& [name, task] : registered_tasks()) s += "\n  " + name + ": " + task.help;
  return s;
}

// The flags of the other tasks that `task` does not take are refused, naming the tasks that do: given to the
// wrong task they would be silently ignored.
void refuse_other_tasks_flags(Cli& cli, const TaskInfo& task) {
  std::map<std::string, std::vector<std::string>> takers;  // flag -> the tasks that declare it
  for (const auto& [name, other] : registered_tasks()) {
    Cli scratch(name, "");
    other.declare(scratch);
    for (const std::string& flag : scratch.names()) takers[flag].push_back(name);
  }
  const std::vector<std::string> own = cli.names();
  for (const auto& [flag, tasks] : takers)
    if (std::find(own.begin(), own.end(), flag) == own.end())
      cli.refuse(flag, "is for " + task_list(tasks) + ", not '" + task.name + "'");
}

// Parses the command line on a Cli holding the common flags and the task's; false after --help.
bool parse(Cli& cli, int argc, char** argv, const TaskInfo& task, const std::string& task_flag) {
  refuse_other_tasks_flags(cli, task);
  if (!cli.parse(argc, argv)) {
    std::string variants;
    for (const auto& [n, d] : attention_variants()) variants += "\n  " + n + ": " + d;
    std::printf("\nattention variants:%s\n", variants.c_str());
    return false;
  }
  if (!cli.positional().empty()) {
    ENG_CHECK(!cli.was_set("task"), "train: the task is given twice, as '", cli.positional()[0], "' and --task ",
              task_flag);
    ENG_CHECK(cli.positional()[0] == task.name, "train: the task comes first (train TASK [flags]), got '",
              cli.positional()[0], "' after the flags of ", task.name);
  }
  return true;
}

void apply_run_flags(const RunFlags& r) {
  if (r.threads > 0) set_num_threads(int(r.threads));
  ENG_CHECK(r.device == "cpu" || r.device == "cuda", "train: --device must be cpu or cuda, got '", r.device, "'");
  ENG_CHECK(r.on_nan == "stop" || r.on_nan == "skip", "train: --on-nan must be stop or skip, got '", r.on_nan, "'");
  set_detect_anomaly(r.detect_anomaly);
}

// Under mpirun (docs/distributed.md): the flags a job of several ranks refuses, and --batch, the global batch, becomes
// this rank's share from here on. Ranks other than 0 print nothing on stdout: the figures are rank 0's, global.
void split_batch(Communicator& comm, const CommonFlags& f) {
  const TrainingFlags& tf = f.training;
  ENG_CHECK(tf.reduce == "exact" || tf.reduce == "fast", "train: --reduce must be exact or fast, got '", tf.reduce,
            "'");
  if (comm.size() == 1) return;
  ENG_CHECK(tf.batch % comm.size() == 0, "train: --batch ", tf.batch, " does not split over ", comm.size(),
            " ranks: give a multiple of ", comm.size(), " (--batch is the global batch, each rank takes --batch / ",
            comm.size(), ")");
  ENG_CHECK(f.run.device == "cpu", "train: several ranks train on the cpu only (a CUDA path would stage gradients "
            "through the host; docs/distributed.md)");
  tf.batch /= comm.size();
  if (comm.rank() != 0) ENG_CHECK(std::freopen("/dev/null", "w", stdout), "train: rank ", comm.rank(),
                                  " cannot silence its output");
}

// The files first, before any data is loaded: a run that cannot write its results stops now, not after training.
// Under mpirun rank 0 alone writes, so it alone claims the outputs.
RunFiles check_files(const RunFlags& r, const TaskFlags& task, bool writes) {
  std::vector<FlagPath> outputs{{"checkpoint", r.checkpoint}, {"log", r.log}}, inputs = task.inputs();
  for (const FlagPath& out : task.outputs()) outputs.push_back(out);
  if (!writes) outputs.clear();
  inputs.push_back({"resume", r.resume});
  inputs.push_back({"init", r.init});
  ENG_CHECK(r.init.empty() || r.resume.empty(), "train: --init starts a new run from a checkpoint's weights, --resume "
            "continues one: give one of them");
  return RunFiles(outputs, inputs);
}

// Memory: refuse a run that cannot fit before allocating anything for it, and bound the allocator by the same
// limit, so that what the estimate misses fails with a message rather than the kernel's out-of-memory kill.
void limit_memory(const TaskPlan& plan, const CommonFlags& f) {
  const double max_memory = f.run.max_memory;
  const double limit = max_memory > 0 ? max_memory * 1024 * 1024 * 1024 : double(allocator::available_system_memory());
  if (limit <= 0) return;
  check_memory(estimate_training_memory(plan.model, f.training.batch, plan.positions, plan.input_features,
                                        f.training.optimizer == "sgd" ? 1 : 2),
               limit, max_memory > 0 ? "of --max-memory" : "of memory available on this machine");
  allocator::set_limit(size_t(limit), max_memory > 0 ? "--max-memory " + exact_decimal(max_memory) + " GiB"
                                                     : "the memory available when train started; --max-memory "
                                                       "sets another");
}

// ---- build, train, report ----------------------------------------------------------------------

// A run's moving parts: the job, its optimizer and schedule, what its checkpoints record, the data generator and
// the step it starts from.
struct Training {
  std::unique_ptr<Job> job;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Schedule> schedule;
  RunConfig config;
  Rng data;
  int64_t start = 0;
  std::unique_ptr<DataParallel> parallel;  // steps of several micro-batches (--accum above 1 or several ranks)
  std::vector<Tensor> params;              // the model's, in the optimizer's order
  OptimizerFactory make_optimizer;         // an optimizer of the run's kind over given parameters
  std::unique_ptr<OptimizerShard> shard;   // --shard-optimizer: `optimizer` holds this rank's slice only
};

Training build(const TaskInfo& task, const TaskPlan& plan, const CommonFlags& f) {
  Training t;
  t.job = plan.make_job();
  t.job->check_data(f.training.batch);
  if (f.run.device == "cuda") {
    check_cuda_run(task, plan.model, f.training.optimizer,
                   !f.run.checkpoint.empty() || !f.run.resume.empty() || !f.run.init.empty());
    t.job->model().to(Device::CUDA);  // before the optimizer, whose state is made where the parameters are
  }
  t.make_optimizer = [&tf = f.training](NamedTensors p) {
    return make_optimizer(tf.optimizer, std::move(p), tf.lr, tf.weight_decay);
  };
  const NamedTensors named = t.job->model().named_parameters();
  for (const auto& np : named) t.params.push_back(np.second);
  Communicator& comm = world();
  ENG_CHECK(!f.training.shard_optimizer || f.run.device == "cpu", "train: --shard-optimizer runs on the cpu only");
  if (f.training.shard_optimizer) t.shard = std::make_unique<OptimizerShard>(comm, named);
  t.optimizer = t.make_optimizer(t.shard ? t.shard->pieces() : named);
  t.schedule = parse_schedule(f.training.schedule, f.training.lr);
  if (f.run.device == "cpu" && comm.size() * f.training.accum > 1) {
    t.parallel = std::make_unique<DataParallel>(comm, t.params, f.training.accum,
                                                f.training.reduce == "fast" ? ReduceOrder::Fast : ReduceOrder::Exact);
    if (t.shard) t.parallel->shard_gradients();
  }
  t.config.model = plan.model.to_map();
  t.config.task = plan.keys;
  t.config.task["name"] = task.name;
  t.data = Rng(uint64_t(f.training.seed) * 7919 + 17);
  if (!f.run.resume.empty()) {
    if (t.shard) {  // the checkpoint holds the whole state: this rank keeps its slice
      const std::unique_ptr<Optimizer> whole = t.make_optimizer(named);
      t.start = resume_run(f.run.resume, *t.job, *whole, t.config, t.data, f.training.steps);
      t.shard->scatter_state(*whole, *t.optimizer);
    } else {
      t.start = resume_run(f.run.resume, *t.job, *t.optimizer, t.config, t.data, f.training.steps);
    }
    std::printf("resumed from %s at step %lld\n", f.run.resume.c_str(), (long long)t.start);
  }
  if (!f.run.init.empty()) {
    init_weights(f.run.init, t.job->model(), t.config);
    std::printf("model weights from %s\n", f.run.init.c_str());
  }
  check_same_weights(comm, t.job->model());
  const std::string ranks = comm.size() > 1 ? ", " + std::to_string(comm.size()) + " ranks (" + f.training.reduce +
                                                  (f.training.shard_optimizer ? ", sharded optimizer)" : ")")
                                            : "";
  std::printf("task %s, %lld parameters, attention %s, %s, %s, %d threads%s\n", task.name.c_str(),
              (long long)t.job->model().num_parameters(), plan.model.attention.c_str(), f.training.optimizer.c_str(),
              f.training.precision.c_str(), num_threads(), ranks.c_str());
  return t;
}

// Rank 0 writes the checkpoint (the ranks hold the same weights; a sharded state is gathered first, by all).
void save(Training& t, const RunFlags& r, int64_t step) {
  if (r.checkpoint.empty()) return;
  const std::unique_ptr<Optimizer> whole = t.shard ? t.shard->gather_state(*t.optimizer, t.make_optimizer) : nullptr;
  if (world().rank() == 0)
    save_run_checkpoint(r.checkpoint, *t.job, whole ? *whole : *t.optimizer, t.config, step, t.data);
}

// One step's forward and backward passes over --accum micro-batches; returns the step's loss (an attention
// penalty trains, it is not reported).
double forward_backward(Training& t, const TrainingFlags& f, TrainingLog& log, int64_t step) {
  double step_loss = 0;
  try {
    if (t.parallel) {
      const StepTotals totals = t.parallel->forward_backward(*t.job, t.data, f.batch);
      log.count(totals.counts);
      return totals.loss;
    }
    StepStart start(*t.job, t.data, f.accum);  // micro-batch m: the step's rows [m batch, (m + 1) batch)
    for (int64_t m = 0; m < f.accum; ++m) {
      StepResult r = start.run(m * f.batch, f.batch);
      Tensor loss = r.penalty.defined() ? add(r.loss, r.penalty) : r.loss;
      if (f.accum > 1) loss = mul_scalar(loss, 1.0 / double(f.accum));
      loss.backward();
      step_loss += r.loss.item() / double(f.accum);
      log.count(r);
    }
    t.data.set_position(t.data.position() + 1);  // the next step's stream
  } catch (const Error& e) {
    fail("train: step ", step + 1, ": ", e.what());
  }
  return step_loss;
}

// The update of step `step`, unless the step holds a non-finite quantity: then --on-nan stop fails and skip drops
// the update. Returns whether it was applied.
bool update(Training& t, const std::string& on_nan, TrainingLog& log, int64_t step, double step_loss,
            double grad_norm) {
  std::string bad = first_nonfinite_of_step(step_loss, t.job->model());
  if (bad.empty() && !std::isfinite(grad_norm))  // sharded: no rank holds the whole gradients, all hold their norm
    bad = std::string("the gradient norm is ") + (std::isnan(grad_norm) ? "nan" : "inf");
  if (!bad.empty()) {
    ENG_CHECK(on_nan == "skip", "train: step ", step, ": ", bad, "; stopped (the last checkpoint is kept; "
              "--detect-anomaly names the op, --on-nan skip drops such steps)");
    log.print("step " + std::to_string(step) + ": " + bad + "; update skipped");
    return false;
  }
  if (t.shard && t.parallel)
    t.shard->set_piece_grads(t.parallel->sums(), t.parallel->has_grad());
  else if (t.shard)
    t.shard->set_piece_grads();
  t.optimizer->step();
  if (t.shard) t.shard->gather_parameters();
  const std::string broken = first_nonfinite_parameter(t.job->model());
  ENG_CHECK(broken.empty(), "train: step ", step, ": the update made ", broken, " (learning rate ",
            t.optimizer->lr(), " too large?); stopped, the last checkpoint is kept");
  log.applied(step_loss);
  return true;
}

struct Outcome {
  int64_t step = 0, skipped = 0;  // the last step; the steps whose update was skipped (--on-nan skip)
  Eval eval;                      // the last evaluation
};

// Steps until --steps, --max-minutes or --target-accuracy, logging, evaluating and saving checkpoints.
Outcome train(Training& t, const CommonFlags& f, TrainingLog& log) {
  const TrainingFlags& tf = f.training;
  const RunFlags& rf = f.run;
  const uint64_t eval_seed = uint64_t(tf.seed) * 104729 + 3;
  Outcome o;
  o.step = t.start;
  t.job->model().train();
  while (o.step < tf.steps) {
    t.optimizer->set_lr(t.schedule->lr(o.step));
    for (const Tensor& p : t.params) p.zero_grad();
    const double step_loss = forward_backward(t, tf, log, o.step);
    const double max_norm = tf.clip > 0 ? tf.clip : INFINITY;
    const double grad_norm = t.parallel ? t.parallel->finish(max_norm) : clip_grad_norm(t.params, max_norm);
    const int64_t step = ++o.step;
    const bool last = step == tf.steps || (tf.max_minutes > 0 && log.elapsed_seconds() >= 60 * tf.max_minutes);
    if (!update(t, rf.on_nan, log, step, step_loss, grad_norm)) ++o.skipped;
    if (step % rf.log_every == 0 || last) log.train_row(step, t.optimizer->lr(), grad_norm);
    if ((rf.eval_every > 0 && step % rf.eval_every == 0) || last) {
      unsigned char reached = 0;  // rank 0 evaluates, and tells the others whether the target is reached
      if (world().rank() == 0) {
        o.eval = evaluate(*t.job, rf.eval_batches, tf.batch, eval_seed);
        log.eval_row(step, o.eval, *t.job, t.optimizer->lr());
        reached = rf.target_accuracy > 0 && o.eval.accuracy >= rf.target_accuracy;
      }
      world().broadcast_bytes(&reached, 1, 0);
      if (reached) {
        std::printf("reached target accuracy %.2f%% at step %lld\n", 100 * rf.target_accuracy, (long long)step);
        save(t, rf, step);
        break;
      }
    }
    if ((rf.checkpoint_every > 0 && step % rf.checkpoint_every == 0) || last) save(t, rf, step);
    if (last) break;
  }
  return o;
}

// The figures on one line, then what the job adds (a sample starts on a line of its own).
void report(Job& job, const Outcome& o, TrainingLog& log, int64_t batch) {
  if (world().rank() != 0) return;
  char wall[48];
  std::snprintf(wall, sizeof wall, ", wall %.1f s", log.elapsed_seconds());
  log.print("final: step " + std::to_string(o.step) + wall +
            (o.skipped > 0 ? ", " + std::to_string(o.skipped) + " steps skipped (non-finite)" : "") + ", eval " +
            eval_figures(o.eval, job));
  const std::string final_report = job.final_report(batch);
  if (!final_report.empty()) std::printf("%s\n", final_report.c_str());
}

int run(int argc, char** argv) {
  const TaskInfo& task = find_task(task_named(argc, argv));
  Cli cli("train", summary());
  cli.add_positionals("TASK", join_names(task_names(), " or ") + " (or --task)", 1);
  const std::string& task_flag = cli.add_string("task", kDefaultTask, join_names(task_names(), " or ") +
                                                " (or the first argument)");
  const CommonFlags f(cli);
  const std::unique_ptr<TaskFlags> task_flags = task.declare(cli);
  if (!parse(cli, argc, argv, task, task_flag)) return 0;
  apply_run_flags(f.run);
  Communicator& comm = world();
  split_batch(comm, f);
  const GemmPrecision precision = parse_precision(f.training.precision, "train: --precision");
  ENG_CHECK(precision == GemmPrecision::F32 || f.run.device == "cpu", "train: --precision bf16 runs on the cpu only");
  const TransformerConfig model = f.model.config(uint64_t(f.training.seed));
  const RunFiles files = check_files(f.run, *task_flags, comm.rank() == 0);
  std::vector<FlagPath> inputs = task_flags->inputs();
  inputs.push_back({"resume", f.run.resume});
  inputs.push_back({"init", f.run.init});
  check_ranks_agree(comm, argc, argv, inputs);
  const TaskPlan plan = task_flags->plan({model, f.model.layers, !f.run.resume.empty()});
  ENG_CHECK(plan.model.mem_len == 0 || comm.size() * f.training.accum == 1, "train: --mem-len reads consecutive "
            "streams, one memory for the whole batch, and does not split over ranks or micro-batches; run it in one "
            "process without --accum");
  limit_memory(plan, f);
  Training t = build(task, plan, f);
  TrainingLog log(comm.rank() == 0 ? f.run.log : "", t.job->decodes_labels(), t.start, f.training.steps);
  const PrecisionScope scope(precision);  // the steps, evaluations and the final report alike
  report(*t.job, train(t, f, log), log, f.training.batch);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  eng::pad_training_heap();
  if (argc < 2) {  // a bare `train` is a newcomer's first try: show how to start, not a 6000-step run
    std::fprintf(stderr, "usage: train TASK [flags]   (TASK: %s)\n"
                         "  e.g. train copy --steps 500        train text --data README.md --steps 200\n"
                         "train TASK --help lists its flags and the attention variants.\n",
                 join_names(task_names(), " or ").c_str());
    return 2;
  }
  const int status = tool_main([&] { return run(argc, argv); },
                               "train: out of memory (lower --batch, the sequence length or the model's size)");
  // A rank that fails alone (a file missing on its host) must not leave the others waiting in a collective.
  if (status != 0 && world().size() > 1) world().abort(status);
  return status;
}
