// The widest instruction set this build's kernel dispatch may pick, fixed when it is compiled. Unset (the default
// build) there is no cap: the dispatch picks at run time among every table (engine/cpu_features.h). Compiled with
// -DENG_SIMD_CAP=Avx2 (a SimdLevel's name; `make embed ISA=avx2`, docs/embedding.md), the dispatch files never call
// a wider table, so a program linked with --gc-sections holds none of its code: the AVX-512 kernels are about 110 KB
// of the static lean embed. The scalar reference table is always linked (a CPU without the capped level runs it).
// Only the dispatch's .cpp files include this header: every other file is the same in every build.
#pragma once
#include "engine/cpu_features.h"

namespace eng {

#ifdef ENG_SIMD_CAP
constexpr SimdLevel kSimdCap = SimdLevel::ENG_SIMD_CAP;
#else
constexpr SimdLevel kSimdCap = SimdLevel::Avx512Bf16;
#endif

// Whether this build may run level `l`'s kernels: a constant, so the calls of a level past the cap are dead code.
constexpr bool built_for(SimdLevel l) { return l <= kSimdCap; }

}  // namespace eng
