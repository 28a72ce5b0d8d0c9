// The x86 body of the quantized block products, included by ops/quant_kernels_avx2.cpp and
// ops/quant_kernels_avx512.cpp, each built for its instruction set (the Makefile's flags): they differ only in the
// instruction that turns a block of 32 weight bytes and 32 activation bytes into 8 int32 partial sums (the Product
// policies), so both give the scalar reference's bits. A tile is up to 4 rows of x by 4 rows of W: each W block is
// loaded once for the rows, and the 4 columns' partial sums of one row are reduced together (three vphaddd and one
// add) to the 4 exact block sums, which then take the f32 steps of ops/quant.h in 4 lanes.
// Everything here is in an anonymous namespace, and the includer includes <immintrin.h> and ops/quant_kernels.h
// first: the two files' copies, built for different instruction sets, must never be merged by the linker, nor an
// inline function of a shared header be built for one of them.
#pragma once
#include <immintrin.h>

#include "ops/quant_kernels.h"

namespace eng::quant_detail {
namespace {

// [Σ p0, Σ p1, Σ p2, Σ p3] of four vectors of 8 int32.
inline __m128i sum4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
  const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
  return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

// A prefetch of p + bytes, computed as an integer: past the last row the address lies outside the weights, where a
// prefetch does not fault but forming the pointer would be undefined.
inline void prefetch_ahead(const uint8_t* p, int64_t bytes) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes)), _MM_HINT_T0);
}

// q4_0: the 32 unsigned 4-bit values in element order (low nibbles are elements 0..15, high ones 16..31).
inline __m256i load_q4(const uint8_t* q) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(bytes), _mm_srli_epi16(bytes, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}
inline __m256i load_q8(const uint8_t* q) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)); }

// The activations of one block for q8_0: |x| as the unsigned operand, shared by the tile's four columns, and x's
// signs, which each column moves onto its weights (vpsignb), so that |x| · sign(x)w = x w. |x| <= 127 and
// |w| <= 128 keep vpmaddubsw's pair sums below 2^15.
struct ActivationsQ8 {
  __m256i x, a;
};

template <class Product, bool kQ4, int64_t R>
void dot_rows(const QuantizedRows& x, const uint8_t* w, int64_t w_rs, int64_t cols, float* c, int64_t ldc) {
  constexpr int64_t B = kQ4 ? 20 : 36;
  const uint8_t* wc[4];
  for (int64_t j = 0; j < 4; ++j) wc[j] = w + (j < cols ? j : cols - 1) * w_rs;  // past cols: computed, not stored
  __m128 acc[R];
  for (int64_t r = 0; r < R; ++r) acc[r] = _mm_setzero_ps();
  for (int64_t b = 0; b < x.blocks; ++b) {
    const int64_t o = b * B;
    // The next tile's block b (4 rows on): the tile's 4 rows are 4 short streams (w_rs bytes each), too short for
    // the hardware prefetcher to learn before they end, and at one row of x the product waits on memory. Fetching
    // one tile ahead took a q8_0 model of 43 MB from 12 to 19-28 GB/s (docs/kernels.md).
    for (int64_t j = 0; j < 4; ++j) prefetch_ahead(wc[j], 4 * w_rs + o);
    const __m128 dw = _mm_setr_ps(block_scale(wc[0] + o), block_scale(wc[1] + o), block_scale(wc[2] + o),
                                  block_scale(wc[3] + o));
    if constexpr (kQ4) {
      const __m256i w0 = load_q4(wc[0] + o + 4), w1 = load_q4(wc[1] + o + 4), w2 = load_q4(wc[2] + o + 4),
                    w3 = load_q4(wc[3] + o + 4);
      for (int64_t r = 0; r < R; ++r) {
        const int64_t xb = r * x.blocks + b;
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + xb * 32));
        const __m128i s = _mm_sub_epi32(sum4(Product::q4(w0, xv), Product::q4(w1, xv), Product::q4(w2, xv),
                                             Product::q4(w3, xv)),
                                        _mm_set1_epi32(8 * x.sum[xb]));
        acc[r] = _mm_add_ps(acc[r], _mm_mul_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(dw, _mm_set1_ps(x.d[xb]))));
      }
    } else {
      const __m256i w0 = load_q8(wc[0] + o + 4), w1 = load_q8(wc[1] + o + 4), w2 = load_q8(wc[2] + o + 4),
                    w3 = load_q8(wc[3] + o + 4);
      for (int64_t r = 0; r < R; ++r) {
        const int64_t xb = r * x.blocks + b;
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + xb * 32));
        const ActivationsQ8 xa{xv, _mm256_abs_epi8(xv)};
        const __m128i s = sum4(Product::q8(xa, w0), Product::q8(xa, w1), Product::q8(xa, w2), Product::q8(xa, w3));
        acc[r] = _mm_add_ps(acc[r], _mm_mul_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(dw, _mm_set1_ps(x.d[xb]))));
      }
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    float out[4];
    _mm_storeu_ps(out, acc[r]);
    for (int64_t j = 0; j < cols; ++j) c[r * ldc + j] = out[j];
  }
}

// The tiles of 4 weight rows along `cols`, one call for the whole strip (the call costs as much as a small tile).
template <class Product, bool kQ4, int64_t R>
void dot_strip(const QuantizedRows& x, const uint8_t* w, int64_t w_rs, int64_t cols, float* c, int64_t ldc) {
  for (int64_t n0 = 0; n0 < cols; n0 += 4)
    dot_rows<Product, kQ4, R>(x, w + n0 * w_rs, w_rs, cols - n0 < 4 ? cols - n0 : 4, c + n0, ldc);
}

template <class Product, bool kQ4>
void dot(const QuantizedRows& x, int64_t rows, const uint8_t* w, int64_t w_rs, int64_t cols, float* c, int64_t ldc) {
  static_assert(kTileRows == 4, "the body is written for tiles of up to 4 rows");
  switch (rows) {
    case 1: return dot_strip<Product, kQ4, 1>(x, w, w_rs, cols, c, ldc);
    case 2: return dot_strip<Product, kQ4, 2>(x, w, w_rs, cols, c, ldc);
    case 3: return dot_strip<Product, kQ4, 3>(x, w, w_rs, cols, c, ldc);
    default: return dot_strip<Product, kQ4, 4>(x, w, w_rs, cols, c, ldc);
  }
}

}  // namespace
}  // namespace eng::quant_detail
