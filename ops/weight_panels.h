// Weights packed once for generation. Each generation step multiplies a few rows (one per sequence in flight) by
// every Linear layer's weight; gemm would pack the weight into its kernel's panels on every call, which on these
// shapes costs more than the product (M = 32, d_model 256: the packing's transposes took a third of a step). While
// a WeightPanelsScope is alive on a thread, `linear` on f32 CPU tensors without gradient and with 3 to 48 rows
// packs each weight the first time it meets it and reuses the panels afterwards (ops/gemm.h, gemm with PackedB);
// so do linear_activation and linear_stacked (ops/matmul.h), the latter with its weights' panels side by side.
//
// The panels are keyed by the weight's data pointer and shape: the cache's owner promises that the weights it
// serves do not change while it lives. LanguageModel::State owns one (models/transformer.h): a recurrent state
// is already a sum over positions projected with one set of weights, so the two share their lifetime.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "ops/gemm.h"

namespace eng {

class WeightPanels {
 public:
  // The panels of B = g.B (K x N, strides b_rs and b_cs), packed on first use.
  const PackedB& get(const GemmArgs<float>& g);
  // The panels of weights W_i [N_i, K] (row-major) side by side, B = [W_0ᵀ W_1ᵀ ...] (K x ΣN_i), packed on first
  // use: their products with one input then run as one (ops/matmul.h, linear_stacked).
  const PackedB& get_stacked(const std::vector<const float*>& weights, const std::vector<int64_t>& rows, int64_t K);
  size_t size() const { return panels_.size() + stacked_.size(); }

 private:
  std::map<std::tuple<const float*, int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<PackedB>> panels_;
  std::map<std::tuple<std::vector<const float*>, std::vector<int64_t>, int64_t>, std::unique_ptr<PackedB>> stacked_;
};

// The cache of this thread's innermost scope, or null.
WeightPanels* active_weight_panels();

class WeightPanelsScope {
 public:
  explicit WeightPanelsScope(WeightPanels& cache);
  ~WeightPanelsScope();
  WeightPanelsScope(const WeightPanelsScope&) = delete;
  WeightPanelsScope& operator=(const WeightPanelsScope&) = delete;

 private:
  WeightPanels* saved_;
};

}  // namespace eng
