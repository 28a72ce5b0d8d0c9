#include "tools/train/nonfinite_checks.h"

#include <cmath>

#include "engine/anomaly.h"

namespace eng::jobs {

std::string first_nonfinite_of_step(double loss, const Module& model) {
  if (!std::isfinite(loss)) return std::string("the loss is ") + (std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf");
  for (const auto& [name, p] : model.named_parameters()) {
    const std::string where = describe_nonfinite(p.grad());
    if (!where.empty()) return "the gradient of parameter '" + name + "' holds " + where;
  }
  return "";
}

std::string first_nonfinite_parameter(const Module& model) {
  for (const auto& [name, p] : model.named_parameters()) {
    const std::string where = describe_nonfinite(p);
    if (!where.empty()) return "parameter '" + name + "' hold " + where;
  }
  return "";
}

}  // namespace eng::jobs
