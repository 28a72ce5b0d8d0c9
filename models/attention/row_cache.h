// Rows appended one position at a time: the state of the recurrent forms whose row t reads the whole prefix
// (causal-improved-clustered, routing, reformer, sinkhorn). A buffer [B, G, capacity, F] in the dtype of the first
// rows (a float dtype, or i64 for hash codes and bucket ids), whose capacity doubles when full, so that appending
// N positions copies O(N) rows in all; it is a tensor, so the allocator's counters see it (bench generate).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace eng {

class RowCache {
 public:
  // Writes x [B, G, 1, F] at position stored(); the first append fixes B, G, F and the dtype, a later x that
  // differs is refused naming `who`.
  void append(const Tensor& x, const std::string& who);
  int64_t stored() const { return stored_; }
  int64_t width() const { return buf_.defined() ? buf_.size(3) : 0; }
  // Row j < stored() of batch-and-head bg = b·G + g: as doubles (float dtypes), or its i64 entries.
  void read(int64_t bg, int64_t j, double* out) const;
  const int64_t* ids(int64_t bg, int64_t j) const;

 private:
  Tensor buf_;
  int64_t stored_ = 0;
};

// Σ_n softmax(logits)_n · values[n·Dv …] into out[0 … Dv): the row of one query over n keys, in double. logits is
// overwritten; a row without keys (n = 0 or all −inf) gives zeros. Returns log Σ_n exp(logits_n) (−inf then).
double softmax_row(std::vector<double>& logits, const std::vector<double>& values, int64_t Dv, double* out);

// The check every such step opens with: the state has consumed `length` tokens and holds `stored` positions.
void check_step_length(const std::string& who, int64_t length, int64_t stored);

}  // namespace eng
