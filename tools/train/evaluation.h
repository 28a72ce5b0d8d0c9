// Evaluation of a job during training: its loss, accuracy and label errors on a fixed set of validation batches
// (the same every time: a generator with its own seed), and the text that reports them.
#pragma once
#include <cstdint>
#include <string>

#include "tools/train/job.h"

namespace eng::jobs {

struct Eval {
  double loss = 0, accuracy = 0;
  int64_t edits = 0, labels = 0;  // label errors and reference labels (jobs that decode labels)
  std::string extra;              // what the job adds (Job::eval_extra)
};

// `batches` batches of `batch` drawn by a generator seeded with `seed`, without gradients, in eval mode.
Eval evaluate(Job& job, int64_t batches, int64_t batch, uint64_t seed);

// ", label error rate 12.34%" when a job counted reference labels, else "".
std::string label_error_text(int64_t edits, int64_t labels);

// "loss 1.2345 (1.78 bits/char), accuracy 12.34%, label error rate 5.00%, ...": the figures of the eval line and
// of the final line.
std::string eval_figures(const Eval& e, const Job& job);

}  // namespace eng::jobs
