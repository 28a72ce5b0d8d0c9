#include "engine/cpu_features.h"

#include <cstdlib>
#include <cstring>

#include "engine/error.h"

namespace eng {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
#elif defined(__aarch64__)
  f.neon = true;  // Advanced SIMD is mandatory on AArch64
#endif
  return f;
}

SimdLevel hardware_level(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512vl && f.fma) return SimdLevel::Avx512;
  if (f.avx2 && f.fma) return SimdLevel::Avx2;
  if (f.neon) return SimdLevel::Neon;
  return SimdLevel::Scalar;
}

SimdLevel detect_level() {
  SimdLevel hw = hardware_level(cpu_features());
  const char* env = std::getenv("ENG_CPU");
  if (!env || !*env) return hw;
  SimdLevel want;
  if (!std::strcmp(env, "scalar"))
    want = SimdLevel::Scalar;
  else if (!std::strcmp(env, "neon"))
    want = SimdLevel::Neon;
  else if (!std::strcmp(env, "avx2"))
    want = SimdLevel::Avx2;
  else if (!std::strcmp(env, "avx512"))
    want = SimdLevel::Avx512;
  else
    fail("ENG_CPU: expected scalar, neon, avx2 or avx512, got '", env, "'");
  return want < hw ? want : hw;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

SimdLevel simd_level() {
  static const SimdLevel l = detect_level();
  return l;
}

const char* simd_level_name(SimdLevel l) {
  switch (l) {
    case SimdLevel::Avx512: return "avx512";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Neon: return "neon";
    default: return "scalar";
  }
}

}  // namespace eng
