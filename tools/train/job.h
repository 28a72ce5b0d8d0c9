// The jobs of build/train: each a task's data and model behind one interface, so that the training loop in
// tools/train.cpp is the same for all. Each job file in tools/train/ registers its tasks (task.h): lm_jobs.cpp
// (decoder-only models), mlm_job.cpp (masked text: encoder-only), seq2seq_job.cpp (encoder-decoder), ctc_job.cpp
// (speech-like frames to labels with CTC), classify_job.cpp (classification over image patches).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "datasets/copy_task.h"
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
  // One batch: training data in training mode, validation data in eval mode (the loop's evaluate() sets it).
  virtual StepResult run(int64_t batch, Rng& data) = 0;
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
