// What the CPU can run, detected once. Kernels pick their variant from this (the scalar kernel is
// always there); ENG_CPU=scalar|avx2|avx512 caps the level for tests and comparisons.
#pragma once

namespace eng {

enum class SimdLevel { Scalar = 0, Neon = 1, Avx2 = 2, Avx512 = 3 };

struct CpuFeatures {
  bool avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512vl = false, neon = false;
};

const CpuFeatures& cpu_features();
// The best level the CPU supports, capped by ENG_CPU when set.
SimdLevel simd_level();
const char* simd_level_name(SimdLevel l);

}  // namespace eng
