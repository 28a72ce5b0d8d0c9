// The training tools' heap (train, bench): glibc's malloc grows its heap by M_TOP_PAD (128 KiB by default) beyond
// each request and trims it back down; these tools ask it to keep 256 MiB instead. On the 2-vCPU Zen 5 VM,
// `bench train` (4 layers, d_model 256, batch 16 x 256, 2 threads) ran 4,403-8,301 tokens/s in six runs with the
// default and 9,421-11,160 in five with the pad, its user CPU time per step about halved, with the same system
// calls and page faults either way (docs/experiments.md): the cause inside malloc was not found, the effect is
// measured. PyTorch's baseline runs with jemalloc for the same reason. Memory: the pad is address space; only pages
// the program touched stay resident. Elsewhere (another C library) this does nothing.
#pragma once
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace eng {

inline void pad_training_heap() {
#if defined(__GLIBC__)
  mallopt(M_TOP_PAD, 256 << 20);
#endif
}

}  // namespace eng
