// Dropout as a module: active in training mode only. Draws its masks from a generator shared by the
// model (its position is saved in checkpoints, so a resumed run draws the same masks).
#pragma once
#include "engine/rng.h"
#include "models/module.h"

namespace eng {

class Dropout : public Module {
 public:
  Dropout(double p, Rng& rng);
  Tensor forward(const Tensor& x) const;
  double p() const { return p_; }

 private:
  double p_;
  Rng* rng_;
};

}  // namespace eng
