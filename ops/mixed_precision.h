// Mixed precision for training (--precision bf16). While a PrecisionScope of Bf16 is alive on a thread, matmul
// and flash_attention on f32 CPU tensors take bf16 products (ops/gemm.h): each operand rounded to bf16 as it is
// packed, which is the bf16 copy of a weight or an activation, and the products accumulated in f32. The
// products of their backward are bf16 too, wherever the backward runs: each op keeps the precision it was
// recorded with. Everything else stays f32: parameters (the master weights), gradients as stored, optimizer
// state, norms, softmax, losses, reductions, the gradient norm and checkpoints. No loss scaling: bf16 has f32's
// exponent range. CUDA tensors ignore the scope.
#pragma once
#include <string>

#include "ops/gemm.h"

namespace eng {

// "fp32" or "bf16"; anything else is an error naming `flag`.
GemmPrecision parse_precision(const std::string& name, const std::string& flag);
const char* precision_name(GemmPrecision p);

// The precision this thread's matrix products take now (F32 outside any scope).
GemmPrecision matmul_precision();

class PrecisionScope {
 public:
  explicit PrecisionScope(GemmPrecision p);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  GemmPrecision saved_;
};

}  // namespace eng
