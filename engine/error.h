// One exception type for every failed check. Messages name the op and the shapes involved,
// so that `ENG_CHECK(a.dim() == 2, "matmul: a must be 2-D, got ", a.shape())` reads well.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/dtype.h"

namespace eng {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string shape_str(const Shape& s);
inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << shape_str(s); }
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  throw Error(os.str());
}

}  // namespace eng

#define ENG_CHECK(cond, ...)                    \
  do {                                          \
    if (!(cond)) ::eng::fail(__VA_ARGS__);      \
  } while (0)
