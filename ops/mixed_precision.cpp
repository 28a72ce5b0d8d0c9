#include "ops/mixed_precision.h"

#include "engine/error.h"
#include "engine/safe_text.h"

namespace eng {
namespace {

thread_local GemmPrecision current = GemmPrecision::F32;

}  // namespace

GemmPrecision parse_precision(const std::string& name, const std::string& flag) {
  if (name == "fp32") return GemmPrecision::F32;
  if (name == "bf16") return GemmPrecision::Bf16;
  fail(flag, ": '", terminal_text(name), "' is not a precision; use fp32 or bf16");
}

const char* precision_name(GemmPrecision p) { return p == GemmPrecision::Bf16 ? "bf16" : "fp32"; }

GemmPrecision matmul_precision() { return current; }

PrecisionScope::PrecisionScope(GemmPrecision p) : saved_(current) { current = p; }
PrecisionScope::~PrecisionScope() { current = saved_; }

}  // namespace eng
