// Differentiable views: each returns a tensor sharing storage with its input (reshape copies only
// when the strides make a view impossible, like PyTorch's reshape). The backward of each maps the
// gradient back through the inverse view.
#pragma once
#include "engine/tensor.h"

namespace eng {

Tensor reshape(const Tensor& a, Shape shape);  // one entry may be -1 (inferred)
Tensor flatten(const Tensor& a, int64_t start_axis = 0, int64_t end_axis = -1);
Tensor permute(const Tensor& a, const Shape& order);
Tensor transpose(const Tensor& a, int64_t axis0 = -2, int64_t axis1 = -1);
Tensor narrow(const Tensor& a, int64_t axis, int64_t start, int64_t length);
Tensor slice(const Tensor& a, int64_t axis, int64_t start, int64_t end, int64_t step = 1);
Tensor expand(const Tensor& a, const Shape& shape);  // broadcast to shape (stride 0), -1 keeps a size
Tensor squeeze(const Tensor& a, int64_t axis);
Tensor unsqueeze(const Tensor& a, int64_t axis);
// [B, G, L, D] -> [B, heads, L, D] with head h reading group h / (heads / G) (grouped-query attention's K/V): a
// stride-0 view for G = 1, a copy for 1 < G < heads (no stride maps h to h / r), a as is for G = heads.
Tensor repeat_heads(const Tensor& a, int64_t heads);

}  // namespace eng
