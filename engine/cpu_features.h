// What the CPU can run, detected once. Kernels pick their variant from this (the scalar kernel is
// always there); ENG_CPU=scalar|neon|avx2|avx512|avx512bf16 caps the level for tests and comparisons. A level
// the CPU cannot run, or an unknown name, is an error naming the levels it offers, not a silent fallback. A build
// may cap the levels it links (engine/simd_cap.h): a level past its cap is such an error too.
// avx512bf16 is AVX-512 plus AVX512_BF16: only bf16 GEMMs (ops/gemm.h) differ there, taking vdpbf16ps; at
// avx512 they take the f32 kernels on bf16-rounded panels, as on a CPU without the extension.
#pragma once

namespace eng {

enum class SimdLevel { Scalar = 0, Neon = 1, Avx2 = 2, Avx512 = 3, Avx512Bf16 = 4 };

struct CpuFeatures {
  bool avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512vl = false, avx512bf16 = false,
       neon = false;
  // Extensions that only the quantized products (ops/quant.h) take, within the avx512 and neon levels.
  bool avx512vnni = false, neon_dotprod = false;
};

const CpuFeatures& cpu_features();
// The best level the CPU supports, capped by ENG_CPU when set. Throws eng::Error where ENG_CPU names no level
// or one this CPU lacks; the thread pool calls it as it starts (engine/threadpool.h), so a program meets the
// error at its start, inside its own error handling, and never from a static initialiser.
SimdLevel simd_level();
// The level `request` (ENG_CPU's text; null or empty: none) gives on a CPU with `f`: what simd_level() does.
SimdLevel simd_level_for(const char* request, const CpuFeatures& f);
const char* simd_level_name(SimdLevel l);

}  // namespace eng
