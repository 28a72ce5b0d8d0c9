// The sum of squares of f32 values, exactly, whatever the order or the grouping: each x² is exact in a double (24-bit
// mantissas multiply into 48 bits), and is added as an integer into a fixed-point accumulator wide enough for every
// square of a finite f32 (2^-298 .. 2^256) and 2^40 of them. Partial sums over slices held by different ranks
// merge exactly, so the gradient norm of a step has the same bits however the gradients are spread over the ranks
// (tools/train/data_parallel.h: under --shard-optimizer each rank holds only its slice of the gradients).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace eng {

class ExactSquares {
 public:
  void add(const float* x, size_t n);
  void merge(const ExactSquares& other);  // this += other
  // The sum, rounded to a double from the exact value's canonical digits (the same bits for the same sum); NaN or
  // infinity if a value added was not finite.
  double value() const;

  static constexpr int kLimbs = 21;  // 32 bits each: 2^-350 .. 2^322
  std::array<uint64_t, kLimbs> limbs{};  // little-endian digits, each < 2^32 after normalize(); raw for all-gathers
  double nonfinite = 0;                  // the sum of the non-finite values' squares (inf or NaN), else 0
  uint64_t pending = 0;                  // adds since the last normalize()

 private:
  void normalize();
};

}  // namespace eng
