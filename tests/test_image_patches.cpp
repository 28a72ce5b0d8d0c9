// Images cut into patches (datasets/image_patches.h) against indexing written out per pixel.
#include "datasets/image_patches.h"

#include <doctest/doctest.h>

#include "engine/error.h"

using namespace eng;

TEST_CASE("image patches: layout, scaling and errors") {
  // Two 2-channel 4x6 images whose pixel (b, c, y, x) holds a distinct byte.
  const int64_t B = 2, C = 2, H = 4, W = 6, P = 2;
  Tensor px = empty({B, C, H, W}, DType::I64);
  auto value = [](int64_t b, int64_t c, int64_t y, int64_t x) { return (b * 97 + c * 41 + y * 11 + x * 3) % 256; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x) px.set_at({b, c, y, x}, double(value(b, c, y, x)));
  const Tensor out = image_patches(px, P);
  REQUIRE(out.shape() == Shape{B, (H / P) * (W / P), C * P * P});
  CHECK(out.dtype() == DType::F32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t token = (y / P) * (W / P) + x / P, k = c * P * P + (y % P) * P + x % P;
          CHECK(out.at({b, token, k}) == doctest::Approx(double(value(b, c, y, x)) / 255.0).epsilon(1e-7));
        }
  // A 1-pixel patch is the raster sequence of pixels; a whole-image patch is one token.
  CHECK(image_patches(px, 1).shape() == Shape{B, H * W, C});
  CHECK(image_patches(zeros({1, 2, 4, 4}, DType::I64), 4).shape() == Shape{1, 1, 32});
  CHECK_THROWS_WITH(image_patches(px, 3), "image_patches: patch 3 does not divide the 4x6 images");
  CHECK_THROWS_WITH(image_patches(zeros({2, 4, 6}, DType::I64), 2),
                    "image_patches: pixels must be i64 [B, C, H, W], got [2, 4, 6]");
}
