// What --on-nan and the update check of build/train look for: the first non-finite quantity of a step, named so
// that the message says where to look.
#pragma once
#include <string>

#include "models/module.h"

namespace eng::jobs {

// "" when there is none; else the loss ("the loss is nan"), or the first parameter whose gradient holds one.
std::string first_nonfinite_of_step(double loss, const Module& model);
// "" when there is none; else the first parameter holding one, after an update.
std::string first_nonfinite_parameter(const Module& model);

}  // namespace eng::jobs
