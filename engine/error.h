// One exception type for every failed check. Messages name the op and the shapes involved,
// so that `ENG_CHECK(a.dim() == 2, "matmul: a must be 2-D, got ", a.shape())` reads well.
// In a build without exceptions (-fno-exceptions: an embedding program, docs/embedding.md) a failed check calls the
// error handler with the message instead, then aborts.
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

// The handler of failed checks in a build without exceptions; it may end the process its own way. When it returns,
// the process aborts: the code after a failed check cannot run. The default prints the message to stderr.
using ErrorHandler = void (*)(const char* message, void* user);
void set_error_handler(ErrorHandler handler, void* user);  // null: the default
[[noreturn]] void fail_without_exceptions(const std::string& message);  // calls the handler, then aborts

template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
#if defined(__cpp_exceptions)
  throw Error(os.str());
#else
  fail_without_exceptions(os.str());
#endif
}

}  // namespace eng

#define ENG_CHECK(cond, ...)                    \
  do {                                          \
    if (!(cond)) ::eng::fail(__VA_ARGS__);      \
  } while (0)
