// Quantized weights (ops/quant.h, models/quantized.h). References: the error bound of the quantization rules; a
// double-precision product of the dequantized weights with activations chosen on the int8 grid (so that only the
// weights are rounded), written here from the format's definition; the scalar kernels for every SIMD level (equal
// bits); the f32 model for the quantized one. The kernel cases are named "gemm: ..." so that CI's ARM run takes them.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/quantized.h"
#include "models/transformer.h"
#include "ops/quant.h"
#include "tests/temp_files.h"

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

namespace {

TransformerConfig small_model(const std::string& attention) {
  TransformerConfig c;
  c.vocab = 16;
  c.d_model = 32;
  c.heads = 2;
  c.d_ff = 64;
  c.decoder_layers = 2;
  c.max_len = 16;
  c.attention = attention;
  c.positional = PositionalKind::Learned;
  return c;
}

// The logits of each step when the tokens 0, 3, 6, ... (mod 16) are fed one at a time.
std::vector<double> step_logits(const LanguageModel& m, int64_t steps) {
  NoGradGuard no_grad;
  auto state = m.new_state();
  std::vector<double> out;
  for (int64_t t = 0; t < steps; ++t) {
    const Tensor logits = m.step(from_vector(std::vector<double>{double(3 * t % 16)}, {1}, DType::I64), state);
    for (double v : logits.to_vector()) out.push_back(v);
  }
  return out;
}

}  // namespace

TEST_CASE("quant: a KV-cache and an RNN-form model generate from q8_0 and q4_0 weights, and from their checkpoints") {
  eng::test::TempDir dir;
  for (const char* attention : {"softmax", "causal-linear"}) {
    LanguageModel f32(small_model(attention));
    f32.eval();
    const std::vector<double> ref = step_logits(f32, 6);
    double range = 0;
    for (double v : ref) range = std::max(range, std::fabs(v));
    const std::string plain = dir.file("f32.safetensors");
    save_checkpoint(plain, f32, nullptr, run_config_metadata({f32.config().to_map(), {}}));
    for (QuantFormat f : kFormats) {
      CAPTURE(attention);
      CAPTURE(quant_format_name(f));
      LanguageModel q(small_model(attention));
      load_checkpoint(plain, q, nullptr);
      q.eval();
      const std::vector<std::string> names = quantize_model(q, f);
      // Every Linear weight (4 per attention layer, 2 per FFN, the head) and the token table; not the positions.
      CHECK(names.size() == 2 * 6 + 2);
      CHECK(q.embed.tokens.weight.dtype() == DType::U8);
      CHECK(q.head.weight.dtype() == DType::U8);
      const std::vector<double> got = step_logits(q, 6);
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(got[i] - ref[i]));
      CHECK(worst <= (f == QuantFormat::Q8_0 ? 0.02 : 0.2) * range);
      // The inference-only checkpoint loads into a fresh model and gives the same bits.
      const std::string path = dir.file(std::string("q_") + quant_format_name(f) + ".safetensors");
      std::map<std::string, std::string> meta = quant_metadata(q);
      CHECK(meta.at("quant.model.head.weight") == quant_format_name(f));
      save_checkpoint(path, q, nullptr, meta);
      LanguageModel loaded(small_model(attention));
      load_checkpoint(path, loaded, nullptr);
      loaded.eval();
      CHECK(step_logits(loaded, 6) == got);
      // Training refuses it.
      Adam adam(f32.named_parameters(), 1e-3);
      CHECK_THROWS_WITH(load_checkpoint(path, f32, &adam),
                        doctest::Contains("holds quantized weights (an inference-only file written by quantize)"));
    }
  }
}

TEST_CASE("quant: a quantized Linear refuses gradients; the reader refuses bad quantized tensors") {
  Rng rng(2);
  Linear lin(32, 4, rng);
  Module& m = lin;
  quantize_model(m, QuantFormat::Q8_0);
  REQUIRE(lin.weight.dtype() == DType::U8);
  const Tensor x = randn({1, 32}, rng).set_requires_grad(true);
  CHECK_THROWS_WITH(lin.forward(x), doctest::Contains("quant_linear: quantized weights are for inference only"));

  eng::test::TempDir dir;
  const std::string good = dir.file("good.safetensors"), bad = dir.file("bad.safetensors");
  save_checkpoint(good, lin, nullptr, quant_metadata(lin));
  Linear fresh(32, 4, rng);
  load_checkpoint(good, fresh, nullptr);
  CHECK(fresh.weight.dtype() == DType::U8);
  CHECK(std::memcmp(fresh.weight.raw_data(), lin.weight.raw_data(), 36 * 4) == 0);

  // Files with a valid checksum whose quantized tensors are wrong.
  auto load_bad = [&](const Tensor& w, std::map<std::string, std::string> meta) -> std::string {
    SafetensorsFile f;
    f.tensors = {{"model.weight", w}, {"model.bias", lin.bias}};
    meta["checksum.crc32"] = check_checksum(f).actual;
    save_safetensors(bad, f.tensors, meta);
    Linear target(32, 4, rng);
    try {
      load_checkpoint(bad, target, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "loaded";
  };
  const std::string at = "checkpoint " + bad + ": ";
  const Tensor q8 = quantize(randn({4, 32}, rng), QuantFormat::Q8_0);
  const Tensor q4 = quantize(randn({4, 32}, rng), QuantFormat::Q4_0);
  CHECK(load_bad(q8, {}) ==
        at + "parameter 'weight' is u8 but no metadata key 'quant.model.weight' gives its format");
  CHECK(load_bad(q8, {{"quant.model.weight", "q5_1"}}) ==
        at + "parameter 'weight': unknown quantized format 'q5_1' (known: q8_0, q4_0)");
  CHECK(load_bad(q4, {{"quant.model.weight", "q8_0"}}) ==
        at + "parameter 'weight': q8_0 blocks of a [4, 32] weight are u8 [4, 1, 36], the file holds u8 [4, 1, 20]");
  Tensor nan_scale = empty(q8.shape(), DType::U8);
  std::memcpy(nan_scale.raw_data(), q8.raw_data(), size_t(q8.numel()));
  const float nan = std::nanf("");
  std::memcpy(static_cast<uint8_t*>(nan_scale.raw_data()) + 2 * 36, &nan, 4);
  CHECK(load_bad(nan_scale, {{"quant.model.weight", "q8_0"}}) ==
        at + "parameter 'weight': block 0 of row 2 has scale nan; scales must be finite");
  CHECK(load_bad(q8, {{"quant.model.weight", "q8_0"}, {"quant.model.other", "q8_0"}}) ==
        at + "metadata key 'quant.model.other' names no parameter of the model");
  CHECK(load_bad(q8, {{"quant.model.weight", "q8_0"}, {"quant.model.bias", "q8_0"}}) ==
        at + "parameter 'bias' cannot be held quantized by its layer (the file records q8_0)");
}
