#include "datasets/image_patches.h"

#include "engine/error.h"

namespace eng {

Tensor image_patches(const Tensor& pixels, int64_t patch) {
  ENG_CHECK(pixels.defined() && pixels.dim() == 4 && pixels.dtype() == DType::I64,
            "image_patches: pixels must be i64 [B, C, H, W], got ",
            pixels.defined() ? shape_str(pixels.shape()) : "undefined");
  const int64_t B = pixels.size(0), C = pixels.size(1), H = pixels.size(2), W = pixels.size(3), P = patch;
  ENG_CHECK(P >= 1 && H % P == 0 && W % P == 0, "image_patches: patch ", P, " does not divide the ", H, "x", W,
            " images");
  const int64_t rows = H / P, cols = W / P, D = C * P * P;
  const Tensor src = pixels.contiguous();
  const int64_t* px = src.data<int64_t>();
  Tensor out = empty({B, rows * cols, D});
  float* o = out.data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t q = 0; q < cols; ++q) {
        float* dst = o + ((b * rows + r) * cols + q) * D;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t i = 0; i < P; ++i)
            for (int64_t j = 0; j < P; ++j)
              *dst++ = float(px[((b * C + c) * H + r * P + i) * W + q * P + j]) / 255.0f;
      }
  return out;
}

}  // namespace eng
