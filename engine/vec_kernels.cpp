// Picks the kernel table of engine/vec_kernels.h for the CPU (capped by ENG_CPU).
#include "engine/vec_kernels.h"

#include "engine/error.h"
#include "engine/simd_cap.h"

namespace eng {

const VecKernels& scalar_vec_kernels();
#if defined(__x86_64__)
const VecKernels& avx2_vec_kernels();
const VecKernels& avx512_vec_kernels();
#elif defined(__aarch64__)
const VecKernels& neon_vec_kernels();
#endif

const VecKernels& vec_kernels_for(SimdLevel level) {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  if (built_for(SimdLevel::Avx512) && level >= SimdLevel::Avx512 && f.avx512f && f.avx512bw && f.avx512vl && f.fma)
    return avx512_vec_kernels();
  if (built_for(SimdLevel::Avx2) && level >= SimdLevel::Avx2 && f.avx2 && f.fma) return avx2_vec_kernels();
#elif defined(__aarch64__)
  if (built_for(SimdLevel::Neon) && level >= SimdLevel::Neon) return neon_vec_kernels();
#else
  (void)level;  // 32-bit ARM and other targets: the scalar table only (docs/embedding.md)
#endif
  return scalar_vec_kernels();
}

const VecKernels& vec_kernels() {
  static const VecKernels& k = vec_kernels_for(simd_level());
  return k;
}

void vec_training_kernel_left_out() {
  fail("vec kernels: a training kernel (a backward pass, a loss or Adam) was called in a build whose tables leave "
       "them out (ENG_VEC_INFERENCE_ONLY: the lean embed)");
}

}  // namespace eng
