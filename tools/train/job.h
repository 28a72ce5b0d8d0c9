// The jobs of build/train: each a task's data and model behind one interface, so that the training loop in
// tools/train.cpp is the same for all. Each job file in tools/train/ registers its tasks (task.h): lm_jobs.cpp
// (decoder-only models), mlm_job.cpp (masked text: encoder-only), seq2seq_job.cpp (encoder-decoder), ctc_job.cpp
// (speech-like frames to labels with CTC), classify_job.cpp (classification over image patches).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "datasets/copy_task.h"
#include "engine/batch_row.h"
#include "engine/rng.h"
#include "models/module.h"
#include "models/transformer.h"

namespace eng::jobs {

struct StepResult {
  Tensor loss;
  int64_t correct = 0, counted = 0, tokens = 0;  // accuracy = correct / counted; tokens (or frames) processed
  // Jobs that decode label sequences (ctc): the edit distance of the decoded labels to the references, and the
  // reference labels; the loop reports edits / labels as the label error rate. 0 / 0 for the others.
  int64_t edits = 0, labels = 0;
  // A term added to the loss for training only (adaptive-span's span penalty); undefined when there is none.
  Tensor penalty;
};

class Job {
 public:
  virtual ~Job() = default;
  virtual Module& model() = 0;
  virtual Rng& model_rng() = 0;
  // Rows [first_row, first_row + batch) of a step's batch: training data in training mode, validation data in eval
  // mode (the loop's evaluate() sets it). Row g draws its data from data.fork(g) alone, and its dropout masks are
  // keyed by g (engine/batch_row.h), so that a row does not depend on how the step is split into micro-batches or
  // over ranks (data_parallel.h).
  StepResult run(const Rng& data, int64_t first_row, int64_t batch) {
    const BatchRowScope rows(first_row);
    return run_rows(data, first_row, batch);
  }
  // Extra evaluation text (e.g. exact-match of greedy decoding), computed without gradients.
  virtual std::string eval_extra(int64_t, Rng&) { return ""; }
  // The loss in the task's own unit, e.g. " (1.93 bits/char)"; "" when nats say it all.
  virtual std::string loss_in_units(double) const { return ""; }
  // A last evaluation after training (e.g. on the test split), computed without gradients.
  virtual std::string final_report(int64_t) { return ""; }
  // Throws when the data cannot serve a run with micro-batches of `batch` to its end (a split too short for a
  // window, or for `batch` streams): called before the first step, so that no run trains and then fails.
  virtual void check_data(int64_t) const {}
  // Whether run() fills StepResult::edits and labels (the CSV log then has a label_error_rate column).
  virtual bool decodes_labels() const { return false; }

 protected:
  virtual StepResult run_rows(const Rng& data, int64_t first_row, int64_t batch) = 0;
};

// The state every micro-batch of a training step starts from: the step's data generator, the model's generator
// (dropout, keyed by it and the global row) and the model's buffers (the attention call counters that choose a
// forward's random rotations, planes or features, data_parallel.h). Each micro-batch runs from it, so that the
// micro-batches of a step, in one process or over ranks, draw its per-row randomness by global row and its
// per-batch randomness alike. After the last, the model's generator and buffers stay where it left them (every
// micro-batch leaves the counters and the generator in the same place); the caller moves the data generator on by
// one word, the next step's stream.
class StepStart {
 public:
  // `micro_batches` this process runs in the step: with one, nothing needs restoring and nothing is copied.
  StepStart(Job& job, const Rng& data, int64_t micro_batches);
  // Rows [first_row, first_row + batch) of the step's batch.
  StepResult run(int64_t first_row, int64_t batch);

 private:
  Job& job_;
  const Rng data_, model_;
  std::vector<Tensor> buffers_;  // copies, when there are several micro-batches
  bool started_ = false;
};

// Token accuracy of argmax(logits) on positions whose target is not kIgnore, added to r.
void count_correct(const Tensor& logits, const Tensor& targets, StepResult& r);
// Cross-entropy of logits [..., V] against targets [...], kIgnore positions left out.
Tensor token_loss(const Tensor& logits, const Tensor& targets);
// Loss and accuracy of a language model's logits [B, L, V] on the batch's targets; in training, the attention's
// own loss terms (adaptive-span's span penalty) as the penalty.
StepResult score_logits(const LanguageModel& model, const Tensor& logits, const LMBatch& b);

// Every digit of v (17 significant), so that a value read back compares equal only to the same double: checkpoint
// keys, the CSV log.
std::string exact_decimal(double v);

}  // namespace eng::jobs
