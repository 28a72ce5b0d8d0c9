// Joining, splitting and indexing along an axis. Index tensors are i64 and never differentiated;
// every index is checked against the size it must stay below before a kernel reads through it.
#pragma once
#include <vector>

#include "engine/tensor.h"

namespace eng {

// Joins tensors of one dtype whose shapes agree except on `axis`.
Tensor concat(const std::vector<Tensor>& xs, int64_t axis = 0);
// Views (narrow) of `size` elements along axis; the last piece may be smaller.
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t axis = 0);
// split into pieces of ceil(n / chunks), so there may be fewer than `chunks` pieces (as in PyTorch).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis = 0);
// out = x with `axis` replaced by index.numel() entries: out[..., i, ...] = x[..., index[i], ...].
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index);
// The adjoint of index_select: out has src's shape with `axis` of size n, zero but for
// out[..., index[i], ...] += src[..., i, ...] (repeated indices add up). Differentiable in src.
Tensor index_add(const Tensor& src, int64_t axis, const Tensor& index, int64_t n);
// torch.gather: index has x's rank (and no larger size outside axis); out has index's shape and
// out[i][j] = x[i][index[i][j]] for axis 1.
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index);
// shape(index) + [num_classes], 1 at each index and 0 elsewhere; not differentiable.
Tensor one_hot(const Tensor& index, int64_t num_classes, DType dtype = DType::F32);
// Rows of weight [V, D] picked by ids (any shape): shape(ids) + [D].
Tensor embedding(const Tensor& weight, const Tensor& ids);

}  // namespace eng
