#!/usr/bin/env bash
# The CUDA check for a machine with a GPU (docs/cuda.md): builds the CUDA=1 test binary and runs the CUDA
# cases (tests/test_cuda.cpp, tests/test_cuda_attention.cpp, tests/test_cuda_model.cpp), which compare every kernel
# and the ops on CUDA tensors with the CPU, then trains a small character LM on the GPU. Meant to fit a short GPU loan:
# one build with all cores, one test run, the output kept in "${OUT:-/tmp}/cuda_tests.txt"; then a short training
# run and the GEMM and attention benchmarks (their outputs beside it).
# Usage: tools/cuda_check.sh   (CUDA_ARCH=80 for an A100; the default, 90, is the H100/H200)
set -euo pipefail
cd "$(dirname "$0")/.."
log="${OUT:-/tmp}/cuda_tests.txt"
mkdir -p "$(dirname "$log")"

# Which GPU this is (the tests print the reason when none is usable).
nvidia-smi -L || echo "nvidia-smi failed or is missing"

# The library, the test binary and the training tool in build-cuda/, kernels built for CUDA_ARCH.
make -j16 CUDA=1 CUDA_ARCH="${CUDA_ARCH:-90}" build-cuda/run_tests build-cuda/train build-cuda/bench

# Every CUDA case; a failure fails the pipeline (pipefail), and so the script.
./build-cuda/run_tests -tc='*cuda*' 2>&1 | tee "$log"

# Without a usable device the cases skip and pass: that is not a GPU check.
if grep -q "CUDA tests skipped" "$log"; then
  echo "cuda_check: no usable GPU, the CUDA cases were skipped" >&2
  exit 1
fi
echo "cuda_check: all CUDA cases passed; output in $log"

# The whole training path on the GPU: forward, backward, clipping, Adam, evaluation and sampling (KV cache).
train_log="${OUT:-/tmp}/cuda_train.txt"
./build-cuda/train text --data README.md --layers 2 --heads 2 --d-model 32 --seq-len 64 --batch 8 --steps 50 \
  --eval-every 50 --log-every 10 --optimizer adam --schedule constant --device cuda 2>&1 | tee "$train_log"
echo "cuda_check: 50 training steps on the GPU; output in $train_log"

# The benchmarks of issue 10: our GEMM beside cuBLAS (loaded at run time), fused softmax and causal linear
# attention (time and memory against N up to 2^17), and generation (naive, stateful, linear RNN).
./build-cuda/bench gemm --device cuda --vs cublas 2>&1 | tee "${OUT:-/tmp}/cuda_bench_gemm.txt"
./build-cuda/bench attention --device cuda --variants softmax:causal,causal-linear --min-log2 10 --max-log2 17 \
  --tokens 131072 2>&1 | tee "${OUT:-/tmp}/cuda_bench_attention.txt"
./build-cuda/bench generate --device cuda --tokens 784,3072 --batch 32 2>&1 | tee "${OUT:-/tmp}/cuda_bench_generate.txt"
echo "cuda_check: benchmarks in ${OUT:-/tmp}/cuda_bench_*.txt"
