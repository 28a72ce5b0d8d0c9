// Images as sequences of patches, the input tokens of a vision transformer (Dosovitskiy et al. 2021, §3.1:
// x ∈ R^{H×W×C} reshaped into N = HW/P² flattened patches x_p ∈ R^{N×(P²·C)}). The patches are taken in raster
// order; each patch lists its channels in turn, each channel's P×P values in raster order. Values are the pixel
// bytes scaled by 1/255.
#pragma once
#include "engine/tensor.h"

namespace eng {

// pixels [B, C, H, W] i64 (0..255, an ImageBatch's) -> [B, (H/P)·(W/P), C·P·P] f32. P must divide H and W.
Tensor image_patches(const Tensor& pixels, int64_t patch);

}  // namespace eng
