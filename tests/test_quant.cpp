// Quantized products (ops/quant.h). References: the error bound of the quantization rules; a double-precision
// product of the dequantized weights with activations chosen on the int8 grid (so that only the weights are
// rounded); the same with any activations, within their rounding; the scalar kernels for every SIMD level (equal
// bits). The cases are named "gemm: ..." so that CI's ARM run (-tc='gemm*') takes them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/rng.h"
#include "ops/quant.h"

using namespace eng;

namespace {

const QuantFormat kFormats[] = {QuantFormat::Q8_0, QuantFormat::Q4_0};

float scale_of(const Tensor& wq, QuantFormat f, int64_t n, int64_t b) {
  float d;
  std::memcpy(&d, static_cast<const uint8_t*>(wq.raw_data()) + (n * wq.size(1) + b) * quant_block_bytes(f), 4);
  return d;
}

// Weights spread over several magnitudes, with an all-zero block in row 0 and a block with a lone large value.
Tensor test_weights(int64_t N, int64_t K, uint64_t seed) {
  Rng rng(seed);
  Tensor w = randn({N, K}, rng);
  float* p = w.data<float>();
  for (int64_t i = 0; i < N * K; ++i) p[i] *= std::pow(10.0f, float((i / 32) % 5) - 2);
  for (int64_t k = 0; k < std::min<int64_t>(K, 32); ++k) p[k] = 0;
  if (N > 1 && K >= 64) p[K + 40] = 50;
  return w;
}

// x on the int8 grid: integers in -127..127 with ±127 in each block, so that dx = 1 and x quantizes to itself.
Tensor grid_activations(int64_t M, int64_t K, uint64_t seed) {
  Rng rng(seed);
  Tensor x = rand({M, K}, rng, DType::F32, -127, 127);
  float* p = x.data<float>();
  for (int64_t i = 0; i < M * K; ++i) p[i] = std::round(p[i]);
  for (int64_t i = 0; i < M * K; i += 32) p[i + (i / 32) % 32] = (i / 32) % 2 ? 127.0f : -127.0f;
  return x;
}

}  // namespace

TEST_CASE("gemm: q8_0 and q4_0 quantization errors stay within half a scale per element") {
  const int64_t N = 3, K = 128;
  const Tensor w = test_weights(N, K, 7);
  for (QuantFormat f : kFormats) {
    CAPTURE(quant_format_name(f));
    const Tensor wq = quantize(w, f);
    CHECK(wq.shape() == Shape{N, K / 32, quant_block_bytes(f)});
    const Tensor back = dequantize(wq, f);
    const uint8_t* bytes = static_cast<const uint8_t*>(wq.raw_data());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const float d = std::fabs(scale_of(wq, f, n, k / 32)), err = std::fabs(w.at({n, k}) - back.at({n, k}));
        // q4_0 clamps the far end of the range to 15: one whole step there.
        const uint8_t* block = bytes + (n * (K / 32) + k / 32) * quant_block_bytes(f) + 4;
        const int j = int(k % 32);
        const bool clamped = f == QuantFormat::Q4_0 && ((j < 16 ? block[j] & 0x0F : block[j - 16] >> 4) == 15);
        CHECK(err <= (clamped ? 1.0f : 0.5f) * d * (1 + 1e-6f) + 1e-30f);
      }
    CHECK(scale_of(wq, f, 0, 0) == 0.0f);  // the all-zero block
    for (int64_t k = 0; k < 32; ++k) CHECK(back.at({0, k}) == 0.0);
  }
  CHECK_THROWS_WITH(quantize(zeros({2, 40}), QuantFormat::Q8_0),
                    "quantize: q8_0 needs K (the last dimension) a multiple of 32, got shape [2, 40]");
  Tensor bad = zeros({1, 32});
  bad.set_at({0, 3}, std::nan(""));
  CHECK_THROWS_WITH(quantize(bad, QuantFormat::Q4_0),
                    doctest::Contains("element 0, 3 of the [1, 32] matrix is nan; only finite weights"));
}

TEST_CASE("gemm: q8_0 and q4_0 products with activations on the int8 grid == the dequantized product in double") {
  const int64_t M = 5, N = 7, K = 96;
  Rng rng(3);
  const Tensor w = test_weights(N, K, 11), x = grid_activations(M, K, 12), bias = rand({N}, rng);
  for (QuantFormat f : kFormats) {
    CAPTURE(quant_format_name(f));
    const Tensor wq = quantize(w, f), deq = dequantize(wq, f);
    for (const std::string& level : quant_kernel_levels()) {
      CAPTURE(level);
      const Tensor y = quant_linear_at(level, x, wq, f, bias);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            ref += deq.at({n, k}) * x.at({m, k});
            mag += std::fabs(deq.at({n, k}) * x.at({m, k}));
          }
          CHECK(std::fabs(y.at({m, n}) - (ref + bias.at({n}))) <= 1e-6 * (mag + 1));
        }
    }
  }
}

TEST_CASE("gemm: q8_0 and q4_0 products on any activations: within the activation rounding of the f32 product") {
  const int64_t M = 3, N = 5, K = 64;
  Rng rng(5);
  const Tensor w = test_weights(N, K, 13), x = randn({M, K}, rng);
  for (QuantFormat f : kFormats) {
    const Tensor wq = quantize(w, f), deq = dequantize(wq, f), y = quant_linear(x, wq, f);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0, bound = 0;
        for (int64_t k = 0; k < K; ++k) {
          double amax = 0;
          for (int64_t i = k / 32 * 32; i < k / 32 * 32 + 32; ++i) amax = std::max(amax, std::fabs(x.at({m, i})));
          ref += deq.at({n, k}) * x.at({m, k});
          bound += std::fabs(deq.at({n, k})) * amax / 127 / 2;  // |x - deq(q(x))| <= dx / 2
        }
        CHECK(std::fabs(y.at({m, n}) - ref) <= bound * 1.001 + 1e-5);
      }
  }
}

TEST_CASE("gemm: q8_0 and q4_0 kernels of each SIMD level == the scalar reference bit for bit, 1..64 rows") {
  const std::vector<std::string> levels = quant_kernel_levels();
  REQUIRE(levels.front() == "scalar");
  MESSAGE("quantized kernel levels on this CPU: " << levels.size());
  Rng rng(21);
  for (int64_t K : {32, 288}) {
    const Tensor w = test_weights(13, K, uint64_t(K)), bias = randn({13}, rng);
    for (QuantFormat f : kFormats) {
      const Tensor wq = quantize(w, f);
      for (int64_t M : {1, 2, 3, 4, 5, 9, 64})
        for (int64_t N : {1, 4, 6, 13}) {
          const Tensor x = randn({M, K}, rng), wn = wq.as_strided({N, K / 32, wq.size(2)}, wq.strides(), 0);
          const Tensor b = N == 13 ? bias : Tensor();
          const Tensor ref = quant_linear_at("scalar", x, wn, f, b);
          for (size_t l = 1; l < levels.size(); ++l) {
            const Tensor y = quant_linear_at(levels[l], x, wn, f, b);
            CAPTURE(levels[l]);
            CAPTURE(quant_format_name(f));
            CAPTURE(M);
            CAPTURE(N);
            CHECK(std::memcmp(y.data<float>(), ref.data<float>(), size_t(M * N) * 4) == 0);
          }
        }
    }
  }
}

