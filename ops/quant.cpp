#include "ops/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/autograd.h"
#include "engine/cpu_features.h"
#include "engine/error.h"
#include "engine/simd_cap.h"
#include "engine/threadpool.h"
#include "ops/quant_kernels.h"

namespace eng {

using quant_detail::QuantizedRows;
using quant_detail::QuantKernels;

int64_t quant_block_bytes(QuantFormat f) { return f == QuantFormat::Q8_0 ? 36 : 20; }
const char* quant_format_name(QuantFormat f) { return f == QuantFormat::Q8_0 ? "q8_0" : "q4_0"; }

bool parse_quant_format(const std::string& name, QuantFormat& out) {
  for (QuantFormat f : {QuantFormat::Q8_0, QuantFormat::Q4_0})
    if (name == quant_format_name(f)) {
      out = f;
      return true;
    }
  return false;
}

namespace {

void put_scale(uint8_t* block, float d) { std::memcpy(block, &d, 4); }

// One block of 32 weights (ops/quant.h gives the rules).
void quantize_block_q8_0(const float* w, uint8_t* out) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(w[i]));
  const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
  put_scale(out, d);
  for (int i = 0; i < 32; ++i) {
    const float q = std::round(w[i] * id);
    out[4 + i] = uint8_t(int8_t(std::clamp(q, -127.0f, 127.0f)));
  }
}

void quantize_block_q4_0(const float* w, uint8_t* out) {
  float m = 0;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(w[i]) > std::fabs(m)) m = w[i];
  const float d = m / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
  put_scale(out, d);
  auto q = [&](float v) { return uint8_t(std::min(15.0f, std::floor(v * id + 8.5f))); };
  for (int j = 0; j < 16; ++j) out[4 + j] = uint8_t(q(w[j]) | (q(w[j + 16]) << 4));
}

void dequantize_block(QuantFormat f, const uint8_t* block, float* out) {
  const float d = quant_detail::block_scale(block);
  if (f == QuantFormat::Q8_0) {
    for (int i = 0; i < 32; ++i) out[i] = d * float(int8_t(block[4 + i]));
  } else {
    for (int j = 0; j < 16; ++j) {
      out[j] = d * float(int(block[4 + j] & 0x0F) - 8);
      out[j + 16] = d * float(int(block[4 + j] >> 4) - 8);
    }
  }
}

// Row r of x (K floats) as int8 blocks, like q8_0: scale dx = max|x| / 127, values round(x / dx), and their sum.
void quantize_activation_row(const float* x, int64_t blocks, int8_t* q, float* d, int32_t* sum) {
  for (int64_t b = 0; b < blocks; ++b, x += 32, q += 32) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float dx = amax / 127.0f, id = dx != 0 ? 1.0f / dx : 0.0f;
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) {
      q[i] = int8_t(std::clamp(std::round(x[i] * id), -127.0f, 127.0f));
      s += q[i];
    }
    d[b] = dx, sum[b] = s;
  }
}

// The quantized activations live as long as their thread and only grow: generation quantizes a row per Linear
// layer and token, and must not allocate for it.
struct ActivationScratch {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum;
};

QuantizedRows quantize_activations(const float* x, int64_t rows, int64_t blocks) {
  thread_local ActivationScratch s;
  const size_t n = size_t(rows * blocks);
  if (s.d.size() < n) s.q.resize(n * 32), s.d.resize(n), s.sum.resize(n);
  for (int64_t r = 0; r < rows; ++r)
    quantize_activation_row(x + r * blocks * 32, blocks, s.q.data() + r * blocks * 32, s.d.data() + r * blocks,
                            s.sum.data() + r * blocks);
  return {blocks, s.q.data(), s.d.data(), s.sum.data()};
}

// Every table this CPU runs under simd_level() (ENG_CPU), the scalar reference first and the best last.
const std::vector<QuantKernels>& kernel_tables() {
  static const std::vector<QuantKernels> tables = [] {
    std::vector<QuantKernels> t{quant_detail::scalar_quant_kernels()};
    [[maybe_unused]] const SimdLevel level = simd_level();
    [[maybe_unused]] const CpuFeatures& f = cpu_features();
#if defined(__x86_64__)
    if (built_for(SimdLevel::Avx2) && level >= SimdLevel::Avx2) t.push_back(quant_detail::avx2_quant_kernels());
    if (built_for(SimdLevel::Avx512) && level >= SimdLevel::Avx512 && f.avx512vnni)
      t.push_back(quant_detail::avx512_vnni_quant_kernels());
#endif
#if defined(__aarch64__)
    if (built_for(SimdLevel::Neon) && level >= SimdLevel::Neon) t.push_back(quant_detail::neon_quant_kernels());
    if (built_for(SimdLevel::Neon) && level >= SimdLevel::Neon && f.neon_dotprod)
      t.push_back(quant_detail::neon_dotprod_quant_kernels());
#endif
    return t;
  }();
  return tables;
}

void check_rows_operand(const Tensor& x, int64_t K, const char* op) {
  ENG_CHECK(x.defined() && x.dtype() == DType::F32 && x.device() == Device::CPU, op,
            ": x must be an f32 CPU tensor, got ", x.defined() ? dtype_name(x.dtype()) : "undefined");
  ENG_CHECK(x.dim() >= 1 && x.size(-1) == K, op, ": x of shape ", x.shape(), " does not end in the weight's K = ", K);
  ENG_CHECK(!(grad_enabled() && x.requires_grad()), op, ": quantized weights are for inference only (no gradient "
            "flows through them): run under NoGradGuard, or train from an f32 checkpoint");
}

// The product's operands, gathered so that the parallel body captures one pointer (std::function stores a lambda
// this small without allocating).
struct Product {
  QuantizedRows x;
  int64_t rows = 0, cols = 0;
  const uint8_t* w = nullptr;
  int64_t w_rs = 0;
  float* y = nullptr;
  quant_detail::QuantDotFn fn = nullptr;
};

// Strips of whole column tiles over threads: each output element is computed the same way whatever the split.
void run_product(const Product& p) {
  using quant_detail::kTileCols;
  using quant_detail::kTileRows;
  const int64_t tiles = (p.cols + kTileCols - 1) / kTileCols;
  const bool threaded = p.rows * p.cols * p.x.blocks * 32 >= (int64_t(1) << 20);
  parallel_for(0, tiles, threaded ? std::max<int64_t>(1, tiles / 64) : tiles, [pp = &p](int64_t lo, int64_t hi) {
    const Product& p = *pp;
    const int64_t n0 = lo * kTileCols, cols = std::min(hi * kTileCols, p.cols) - n0;
    for (int64_t m0 = 0; m0 < p.rows; m0 += kTileRows) {
      QuantizedRows x = p.x;
      x.q += m0 * x.blocks * 32, x.d += m0 * x.blocks, x.sum += m0 * x.blocks;
      p.fn(x, std::min(kTileRows, p.rows - m0), p.w + n0 * p.w_rs, p.w_rs, cols, p.y + m0 * p.cols + n0, p.cols);
    }
  });
}

// y [M, N] = x [M, K] · Wᵀ (+ bias), raw rows: the body of every quantized product.
void product_rows(const QuantKernels& k, const float* x, int64_t M, const Tensor& wq, QuantFormat f, const float* bias,
                  float* y) {
  const int64_t N = wq.size(0), blocks = wq.size(1);
  if (M == 0) return;
  Product p;
  p.x = quantize_activations(x, M, blocks);
  p.rows = M, p.cols = N;
  p.w = static_cast<const uint8_t*>(wq.raw_data());
  p.w_rs = blocks * quant_block_bytes(f);
  p.y = y;
  p.fn = f == QuantFormat::Q8_0 ? k.q8_0 : k.q4_0;
  run_product(p);
  if (bias)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) y[m * N + n] += bias[n];
}

Tensor quant_linear_with(const QuantKernels& k, const Tensor& x, const Tensor& wq, QuantFormat f, const Tensor& bias) {
  check_quantized(wq, f, "quant_linear: weight");
  const int64_t N = wq.size(0), blocks = wq.size(1), K = blocks * kQuantBlock;
  check_rows_operand(x, K, "quant_linear");
  ENG_CHECK(!bias.defined() || (bias.dtype() == DType::F32 && bias.device() == Device::CPU && bias.dim() == 1 &&
                                bias.size(0) == N),
            "quant_linear: bias must be f32 [", N, "], got ", bias.defined() ? dtype_name(bias.dtype()) : "", " ",
            bias.defined() ? bias.shape() : Shape{});
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor y = empty(out_shape);
  const Tensor xc = x.contiguous();
  const Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  product_rows(k, xc.data<float>(), x.numel() / K, wq, f, bc.defined() ? bc.data<float>() : nullptr, y.data<float>());
  return y;
}

}  // namespace

QuantFormat quant_format_of(const Tensor& wq, const std::string& where) {
  ENG_CHECK(wq.defined() && wq.dtype() == DType::U8 && wq.dim() == 3, where, ": a quantized weight is u8 [N, K/32, ",
            "36 (q8_0) or 20 (q4_0)], got ", wq.defined() ? dtype_name(wq.dtype()) : "undefined", " ",
            wq.defined() ? wq.shape() : Shape{});
  for (QuantFormat f : {QuantFormat::Q8_0, QuantFormat::Q4_0})
    if (wq.size(2) == quant_block_bytes(f)) return f;
  fail(where, ": a quantized weight's blocks are 36 (q8_0) or 20 (q4_0) bytes, got shape ", wq.shape());
}

void check_quantized(const Tensor& wq, QuantFormat f, const std::string& where) {
  const int64_t B = quant_block_bytes(f);
  ENG_CHECK(wq.defined() && wq.dtype() == DType::U8 && wq.dim() == 3 && wq.size(2) == B && wq.size(1) >= 1 &&
                wq.device() == Device::CPU && wq.is_contiguous(),
            where, ": ", quant_format_name(f), " weights are a contiguous CPU u8 tensor [N, K/32, ", B, "], got ",
            wq.defined() ? dtype_name(wq.dtype()) : "undefined", " ", wq.defined() ? wq.shape() : Shape{});
}

void validate_quantized(const Tensor& wq, QuantFormat f, const std::string& where) {
  check_quantized(wq, f, where);
  const int64_t N = wq.size(0), blocks = wq.size(1), B = quant_block_bytes(f);
  const uint8_t* p = static_cast<const uint8_t*>(wq.raw_data());
  for (int64_t i = 0; i < N * blocks; ++i) {
    const float d = quant_detail::block_scale(p + i * B);
    ENG_CHECK(std::isfinite(d), where, ": block ", i % blocks, " of row ", i / blocks, " has scale ", d,
              "; scales must be finite");
  }
}

Tensor quantize(const Tensor& w, QuantFormat f) {
  ENG_CHECK(w.defined() && w.dtype() == DType::F32 && w.dim() == 2 && w.device() == Device::CPU, "quantize: ",
            "expects an f32 CPU matrix [N, K], got ", w.defined() ? dtype_name(w.dtype()) : "undefined", " ",
            w.defined() ? w.shape() : Shape{});
  const int64_t N = w.size(0), K = w.size(1), blocks = K / kQuantBlock, B = quant_block_bytes(f);
  ENG_CHECK(K > 0 && K % kQuantBlock == 0, "quantize: ", quant_format_name(f), " needs K (the last dimension) a ",
            "multiple of ", kQuantBlock, ", got shape ", w.shape());
  const Tensor wc = w.detach().contiguous();
  const float* src = wc.data<float>();
  for (int64_t i = 0; i < N * K; ++i)
    ENG_CHECK(std::isfinite(src[i]) && std::fabs(src[i]) < 1e30f, "quantize: element ", i / K, ", ", i % K,
              " of the [", N, ", ", K, "] matrix is ", src[i], "; only finite weights below 1e30 are quantized");
  Tensor out = empty({N, blocks, B}, DType::U8);
  uint8_t* dst = static_cast<uint8_t*>(out.raw_data());
  for (int64_t i = 0; i < N * blocks; ++i) {
    if (f == QuantFormat::Q8_0)
      quantize_block_q8_0(src + i * 32, dst + i * B);
    else
      quantize_block_q4_0(src + i * 32, dst + i * B);
  }
  return out;
}

Tensor dequantize(const Tensor& wq, QuantFormat f) {
  check_quantized(wq, f, "dequantize");
  const int64_t N = wq.size(0), blocks = wq.size(1), B = quant_block_bytes(f);
  Tensor out = empty({N, blocks * kQuantBlock});
  const uint8_t* src = static_cast<const uint8_t*>(wq.raw_data());
  float* dst = out.data<float>();
  for (int64_t i = 0; i < N * blocks; ++i) dequantize_block(f, src + i * B, dst + i * 32);
  return out;
}

Tensor quant_linear(const Tensor& x, const Tensor& wq, QuantFormat f, const Tensor& bias) {
  return quant_linear_with(kernel_tables().back(), x, wq, f, bias);
}

std::vector<std::string> quant_kernel_levels() {
  std::vector<std::string> names;
  for (const QuantKernels& k : kernel_tables()) names.push_back(k.name);
  return names;
}

Tensor quant_linear_at(const std::string& level, const Tensor& x, const Tensor& wq, QuantFormat f, const Tensor& bias) {
  for (const QuantKernels& k : kernel_tables())
    if (level == k.name) return quant_linear_with(k, x, wq, f, bias);
  fail("quant_linear: kernel level '", level, "' is not among those this CPU runs");
}

void quant_linear_rows(const float* x, int64_t M, const Tensor& wq, QuantFormat f, const float* bias, float* y) {
  product_rows(kernel_tables().back(), x, M, wq, f, bias, y);
}

void quant_dequantize_row(const Tensor& wq, QuantFormat f, int64_t row, float* out) {
  const int64_t blocks = wq.size(1), B = quant_block_bytes(f);
  const uint8_t* src = static_cast<const uint8_t*>(wq.raw_data()) + row * blocks * B;
  for (int64_t b = 0; b < blocks; ++b) dequantize_block(f, src + b * B, out + b * kQuantBlock);
}

Tensor quant_embedding(const Tensor& wq, QuantFormat f, const Tensor& ids) {
  check_quantized(wq, f, "quant_embedding: table");
  ENG_CHECK(ids.defined() && ids.dtype() == DType::I64 && ids.device() == Device::CPU,
            "quant_embedding: ids must be an i64 CPU tensor");
  const int64_t V = wq.size(0), blocks = wq.size(1), K = blocks * kQuantBlock, B = quant_block_bytes(f);
  Shape out_shape = ids.shape();
  out_shape.push_back(K);
  Tensor out = empty(out_shape);
  const Tensor idc = ids.contiguous();
  const int64_t* id = idc.data<int64_t>();
  const uint8_t* table = static_cast<const uint8_t*>(wq.raw_data());
  float* dst = out.data<float>();
  for (int64_t i = 0; i < idc.numel(); ++i) {
    ENG_CHECK(id[i] >= 0 && id[i] < V, "quant_embedding: id ", id[i], " is outside 0..", V - 1);
    for (int64_t b = 0; b < blocks; ++b) dequantize_block(f, table + (id[i] * blocks + b) * B, dst + i * K + b * 32);
  }
  return out;
}

}  // namespace eng
