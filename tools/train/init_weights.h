// --init CHECKPOINT: a run that starts from the model weights of an existing checkpoint (fine-tuning) rather than
// from random ones, with a fresh optimizer at step 0. The checkpoint must hold every parameter of the model built
// from the flags, with its shape (models/checkpoint.h checks that and names the first that differs); when it records
// its config (a checkpoint written by train), every model key but seed and dropout must equal this run's, and so
// must the tokenizer of a text model (task key "tokenizer"), so that ids and shapes mean the same thing. A file
// without config metadata (weights imported from elsewhere) is taken on its shapes alone.
#pragma once
#include <string>

#include "models/checkpoint.h"
#include "models/module.h"

namespace eng::jobs {

void init_weights(const std::string& path, Module& model, const RunConfig& config);

}  // namespace eng::jobs
