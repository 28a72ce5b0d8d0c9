#include "ops/weight_panels.h"

namespace eng {

namespace {
thread_local WeightPanels* active = nullptr;
}  // namespace

const PackedB& WeightPanels::get(const GemmArgs<float>& g) {
  auto& slot = panels_[{g.B, g.K, g.N, g.b_rs, g.b_cs}];
  if (!slot || slot->level != simd_level()) slot = std::make_unique<PackedB>(pack_b(g));
  return *slot;
}

WeightPanels* active_weight_panels() { return active; }

WeightPanelsScope::WeightPanelsScope(WeightPanels& cache) : saved_(active) { active = &cache; }
WeightPanelsScope::~WeightPanelsScope() { active = saved_; }

}  // namespace eng
