#include "ops/weight_panels.h"

#include <algorithm>

namespace eng {

namespace {
thread_local WeightPanels* active = nullptr;
}  // namespace

const PackedB& WeightPanels::get(const GemmArgs<float>& g) {
  auto& slot = panels_[{g.B, g.K, g.N, g.b_rs, g.b_cs}];
  if (!slot || slot->level != simd_level()) slot = std::make_unique<PackedB>(pack_b(g));
  return *slot;
}

const PackedB& WeightPanels::get_stacked(const std::vector<const float*>& weights, const std::vector<int64_t>& rows,
                                         int64_t K) {
  auto& slot = stacked_[{weights, rows, K}];
  if (!slot || slot->level != simd_level()) {
    std::vector<float> all;  // [ΣN_i, K]: packed as one weight, then dropped
    for (size_t i = 0; i < weights.size(); ++i) all.insert(all.end(), weights[i], weights[i] + rows[i] * K);
    GemmArgs<float> g;
    g.K = K, g.N = int64_t(all.size()) / std::max<int64_t>(K, 1);
    g.B = all.data(), g.b_rs = 1, g.b_cs = K;
    slot = std::make_unique<PackedB>(pack_b(g));
  }
  return *slot;
}

WeightPanels* active_weight_panels() { return active; }

WeightPanelsScope::WeightPanelsScope(WeightPanels& cache) : saved_(active) { active = &cache; }
WeightPanelsScope::~WeightPanelsScope() { active = saved_; }

}  // namespace eng
