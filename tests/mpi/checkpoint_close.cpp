// checkpoint_close A B TOL [SKIP]: whether the model weights of two checkpoints agree tensor by tensor within TOL
// in relative L2 norm, ||a - b|| / ||b|| (the promise of --reduce fast against exact, docs/distributed.md). The
// optimizer's state ("optim.*") and the tensors whose names end in SKIP are not compared. Prints the largest
// relative difference; exit 1 beyond TOL, or when the files do not hold the same tensors.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "engine/error.h"
#include "engine/safetensors.h"
#include "tools/tool_main.h"

using namespace eng;

namespace {

int run(int argc, char** argv) {
  ENG_CHECK(argc == 4 || argc == 5, "usage: checkpoint_close A B TOL [SKIP]");
  const double tol = std::atof(argv[3]);
  const std::string skip = argc == 5 ? argv[4] : "";
  const auto skipped = [&](const std::string& name) {
    return !skip.empty() && name.size() >= skip.size() &&
           name.compare(name.size() - skip.size(), skip.size(), skip) == 0;
  };
  const SafetensorsFile a = load_safetensors(argv[1]), b = load_safetensors(argv[2]);
  std::map<std::string, Tensor> other(b.tensors.begin(), b.tensors.end());
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, t] : a.tensors) {
    if (name.rfind("optim.", 0) == 0 || skipped(name)) continue;
    const auto it = other.find(name);
    ENG_CHECK(it != other.end() && it->second.shape() == t.shape() && t.dtype() == DType::F32 &&
                  it->second.dtype() == DType::F32,
              "checkpoint_close: '", name, "' is not an f32 tensor of the same shape in both files");
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double x = t.data<float>()[i], y = it->second.data<float>()[i];
      diff += (x - y) * (x - y);
      norm += y * y;
    }
    const double rel = std::sqrt(diff) / std::fmax(std::sqrt(norm), 1e-30);
    if (rel > worst || worst_name.empty()) worst = rel, worst_name = name;
  }
  std::printf("largest relative difference %.3g (%s), tolerance %.3g\n", worst, worst_name.c_str(), tol);
  return worst <= tol ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return tool_main([&] { return run(argc, argv); }, "checkpoint_close: out of memory"); }
