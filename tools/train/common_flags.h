// The flags of build/train that every task takes, in three groups: the model's shape, the optimisation, and the
// run around it (threads, device, logs, evaluation, checkpoints, guards). A task's own flags live with the task
// (task.h). Each group's constructor declares its flags on the run's Cli; the members read them once parsed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/cli.h"
#include "models/transformer.h"

namespace eng::jobs {

struct ModelFlags {
  explicit ModelFlags(Cli& cli);
  // The model the flags describe, refusing a bad --norm or --norm-type; vocab, layers and max_len are the task's.
  TransformerConfig config(uint64_t seed) const;
  int64_t &layers, &heads, &kv_heads, &d_model, &d_ff;
  double& dropout;
  std::string& attention;
  std::vector<std::string>& attn_opts;
  std::string &norm, &norm_type, &positional, &activation;
  bool& reversible;
  // The architecture options of GPT-2 and LLaMA-family models (docs/model.md).
  bool &bias, &tie_embeddings;
  double &embed_scale, &rope_theta;
  std::string& rope_pairing;
  double& norm_eps;
};

struct TrainingFlags {
  explicit TrainingFlags(Cli& cli);
  std::string& optimizer;
  double& lr;
  std::string& schedule;
  double &weight_decay, &clip;
  int64_t &accum, &steps;
  double& max_minutes;
  int64_t &batch, &seed;
  std::string& precision;  // fp32 or bf16 (ops/mixed_precision.h)
  // Several ranks (docs/distributed.md): how gradients are summed over them, and ZeRO-1 optimizer sharding.
  std::string& reduce;
  bool& shard_optimizer;
};

struct RunFlags {
  explicit RunFlags(Cli& cli);
  int64_t& threads;
  std::string &device, &log;
  int64_t &log_every, &eval_every, &eval_batches;
  std::string& checkpoint;
  int64_t& checkpoint_every;
  std::string& resume;
  std::string& init;
  double& target_accuracy;
  std::string& on_nan;
  double& max_memory;
  bool& detect_anomaly;
};

struct CommonFlags {
  explicit CommonFlags(Cli& cli) : model(cli), training(cli), run(cli) {}
  ModelFlags model;
  TrainingFlags training;
  RunFlags run;
};

}  // namespace eng::jobs
