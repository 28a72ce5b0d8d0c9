// Building a model only for a checkpoint to replace all its weights (bind_checkpoint, models/checkpoint.h) need not
// draw them: while a SkipRandomInitGuard lives, on its thread, rand() and randn() (engine/tensor.h) return
// uninitialised tensors and advance no generator. The medium model of docs/checkpoint.md then builds in
// milliseconds instead of ~170 ms of draws, and the pages of its initial weights are never touched, so they add
// nothing to the peak RSS. Only for a model whose every random tensor is a parameter or a buffer, all of which the
// checkpoint must hold (bind_checkpoint checks it): a tensor a layer draws for its own use would keep garbage.
// models/generator.h's models qualify; `embed` rebuilds any other model without the guard.
#pragma once

namespace eng {

class SkipRandomInitGuard {
 public:
  SkipRandomInitGuard();
  ~SkipRandomInitGuard();
  SkipRandomInitGuard(const SkipRandomInitGuard&) = delete;
  SkipRandomInitGuard& operator=(const SkipRandomInitGuard&) = delete;

 private:
  bool prev_;
};

bool skipping_random_init();

}  // namespace eng
