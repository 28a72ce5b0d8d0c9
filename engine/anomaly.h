// Finding the first NaN or Inf: in a tensor, in what an op computes, and in what its backward returns.
//
// With anomaly detection on (off by default: it reads every op's output once more), record() checks each
// recorded op's output and run_backward() each gradient an op's backward returns; the first non-finite
// value made from finite inputs throws an error naming the op, the tensor's shape and the element. Inputs
// that already hold NaN or Inf are not blamed on the op that reads them: the op that made them was.
#pragma once
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace eng {

// Flat row-major index of the first NaN or ±Inf element, or -1 when all are finite (always for i64).
int64_t first_nonfinite(const Tensor& t);
// "nan at element 3 of [2, 4]": where first_nonfinite points, for messages; empty when all are finite.
std::string describe_nonfinite(const Tensor& t);

void set_detect_anomaly(bool on);
bool detect_anomaly();

// Throws when `out` holds a non-finite value and every input is finite. Called by record().
void check_op_output(const char* op, const Tensor& out, const std::vector<Tensor>& inputs);
// Throws when gradient `i` of op's backward is non-finite and grad_output is finite. Called by run_backward().
void check_op_gradient(const char* op, size_t i, const Tensor& grad_input, const Tensor& grad_output);

}  // namespace eng
