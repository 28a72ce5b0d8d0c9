// bench gemm --device cuda (tools/bench/gemm_cuda.cpp): our CUDA GEMM beside cuBLAS (--vs cublas, loaded at run
// time). In a build without CUDA it throws eng::Error saying how to rebuild.
#pragma once
#include <cstdint>
#include <string>

namespace eng {
// rounds: alternating rounds per shape (the best of each side counts); reps: queued calls per timed run.
int bench_gemm_cuda(const std::string& vs, int64_t rounds, int64_t reps);
}  // namespace eng
