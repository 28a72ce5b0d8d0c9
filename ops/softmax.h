// Softmax and log-softmax along one axis, numerically stable (the row maximum is subtracted
// before exponentiating, so rows like [1000, 1001] stay finite).
//
// A row that is entirely -inf (a fully masked attention row) has no defined softmax; PyTorch
// returns NaN. Here softmax returns zeros for it and log_softmax returns -inf (the log of those
// zeros), and the gradient through such a row is zero for softmax, so one fully masked row does not
// poison a whole batch with NaN.
#pragma once
#include "engine/tensor.h"

namespace eng {

Tensor softmax(const Tensor& a, int64_t axis = -1);
Tensor log_softmax(const Tensor& a, int64_t axis = -1);

}  // namespace eng
