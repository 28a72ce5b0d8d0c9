// Whole-string number parsing with a declared valid range: the one parser behind command-line flags,
// environment variables (ENG_THREADS) and numbers read from files' metadata. A value is accepted only when the
// whole text is the number (no leading space, no trailing "x"), it is finite, and it lies in its range; otherwise
// eng::Error says what was expected: "<what> expects an integer in 1..1024, got '4x'".
#pragma once
#include <cstdint>
#include <limits>
#include <string>

namespace eng {

// lo <= v <= hi.
struct IntRange {
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  static IntRange at_least(int64_t lo) { return {lo, std::numeric_limits<int64_t>::max()}; }
  bool contains(int64_t v) const { return lo <= v && v <= hi; }
  std::string text() const;  // "1..1024", ">= 0", "any integer"
};

// lo <= v <= hi, a bound excluded where it is open; never NaN or infinite.
struct RealRange {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  static RealRange closed(double lo, double hi) { return {lo, hi, false, false}; }
  static RealRange at_least(double lo) { return {lo, std::numeric_limits<double>::infinity(), false, false}; }
  static RealRange above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true, false}; }
  static RealRange below(double lo, double hi) { return {lo, hi, false, true}; }  // [lo, hi)
  bool contains(double v) const;
  std::string text() const;  // "in [0, 1)", ">= 0", "> 0", "finite"
};

int64_t parse_int(const std::string& text, IntRange range, const std::string& what);
double parse_real(const std::string& text, RealRange range, const std::string& what);

}  // namespace eng
