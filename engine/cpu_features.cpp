#include "engine/cpu_features.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/error.h"
#include "engine/safe_text.h"
#include "engine/simd_cap.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace eng {
namespace {

constexpr SimdLevel kLevels[] = {SimdLevel::Scalar, SimdLevel::Neon, SimdLevel::Avx2, SimdLevel::Avx512,
                                 SimdLevel::Avx512Bf16};

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
#elif defined(__aarch64__)
  f.neon = true;  // Advanced SIMD is mandatory on AArch64
#if defined(__linux__)
  f.neon_dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
#endif
  return f;
}

// What the CPU has, whatever this build runs.
SimdLevel cpu_level(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512vl && f.fma)
    return f.avx512bf16 ? SimdLevel::Avx512Bf16 : SimdLevel::Avx512;
  if (f.avx2 && f.fma) return SimdLevel::Avx2;
  if (f.neon) return SimdLevel::Neon;
  return SimdLevel::Scalar;
}

bool cpu_runs(SimdLevel l, const CpuFeatures& f) {
  switch (l) {
    case SimdLevel::Scalar: return true;
    case SimdLevel::Neon: return f.neon;
    case SimdLevel::Avx2: return f.avx2 && f.fma;
    case SimdLevel::Avx512: return cpu_level(f) >= SimdLevel::Avx512;
    case SimdLevel::Avx512Bf16: return cpu_level(f) == SimdLevel::Avx512Bf16;
  }
  return false;
}

// A level this program runs: the CPU has it and the build has its kernels (engine/simd_cap.h).
bool runs(SimdLevel l, const CpuFeatures& f) { return built_for(l) && cpu_runs(l, f); }

SimdLevel hardware_level(const CpuFeatures& f) {
  SimdLevel best = SimdLevel::Scalar;
  for (SimdLevel l : kLevels)
    if (runs(l, f)) best = l;
  return best;
}

std::string offered(const CpuFeatures& f) {
  std::string s;
  for (SimdLevel l : kLevels)
    if (runs(l, f)) s += std::string(s.empty() ? "" : ", ") + simd_level_name(l);
  return s;
}

}  // namespace

SimdLevel simd_level_for(const char* request, const CpuFeatures& f) {
  if (!request || !*request) return hardware_level(f);
  for (SimdLevel l : kLevels) {
    if (std::strcmp(request, simd_level_name(l))) continue;
    ENG_CHECK(built_for(l), "ENG_CPU: this program was built for ", simd_level_name(kSimdCap), " at most, not ",
              request, "; it offers ", offered(f));
    ENG_CHECK(runs(l, f), "ENG_CPU: this CPU cannot run ", request, "; it offers ", offered(f),
              " (unset ENG_CPU for the best of them)");
    return l;
  }
  fail("ENG_CPU: unknown level '", terminal_text(request), "'; this CPU offers ", offered(f));
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

SimdLevel simd_level() {
  static const SimdLevel l = simd_level_for(std::getenv("ENG_CPU"), cpu_features());
  return l;
}

const char* simd_level_name(SimdLevel l) {
  switch (l) {
    case SimdLevel::Avx512Bf16: return "avx512bf16";
    case SimdLevel::Avx512: return "avx512";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Neon: return "neon";
    default: return "scalar";
  }
}

}  // namespace eng
