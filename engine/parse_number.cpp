#include "engine/parse_number.h"

#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "engine/error.h"
#include "engine/safe_text.h"

namespace eng {

namespace {

std::string number_text(double v) { return general_text(v, 6); }

// A value as it is quoted back in a message: at most 40 bytes, escaped (engine/safe_text.h), so that a hostile
// argument or file cannot reach the terminal as escape sequences.
std::string quoted(const std::string& text) {
  return "'" + terminal_text(text.substr(0, 40)) + (text.size() > 40 ? "..." : "") + "'";
}

}  // namespace

std::string IntRange::text() const {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  if (lo == kMin && hi == kMax) return "";
  if (hi == kMax) return " >= " + std::to_string(lo);
  if (lo == kMin) return " <= " + std::to_string(hi);
  return " in " + std::to_string(lo) + ".." + std::to_string(hi);
}

bool RealRange::contains(double v) const {
  if (!std::isfinite(v)) return false;
  return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string RealRange::text() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (!has_lo && !has_hi) return "";
  if (!has_hi) return std::string(lo_open ? " > " : " >= ") + number_text(lo);
  if (!has_lo) return std::string(hi_open ? " < " : " <= ") + number_text(hi);
  return " in " + std::string(lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) + (hi_open ? ")" : "]");
}

int64_t parse_int(const std::string& text, IntRange range, const std::string& what) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = text.empty() || std::isspace(static_cast<unsigned char>(s[0])) ? 0 : std::strtoll(s, &end, 10);
  const bool whole = end && end != s && *end == '\0' && end == s + text.size();
  ENG_CHECK(whole && errno != ERANGE && range.contains(v), what, " expects an integer", range.text(), ", got ",
            quoted(text));
  return v;
}

double parse_real(const std::string& text, RealRange range, const std::string& what) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = text.empty() || std::isspace(static_cast<unsigned char>(s[0])) ? 0 : std::strtod(s, &end);
  const bool whole = end && end != s && *end == '\0' && end == s + text.size();
  // ERANGE also reports underflow to a denormal or zero, which is a fine value; overflow is caught as infinite.
  ENG_CHECK(whole && range.contains(v), what, " expects a finite number", range.text(), ", got ", quoted(text));
  return v;
}

}  // namespace eng
