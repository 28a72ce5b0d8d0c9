// One exception type for every failed check. Messages name the op and the shapes involved,
// so that `ENG_CHECK(a.dim() == 2, "matmul: a must be 2-D, got ", a.shape())` reads well.
// In a build without exceptions (-fno-exceptions: an embedding program, docs/embedding.md) a failed check calls the
// error handler with the message instead, then aborts.
#pragma once
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "engine/dtype.h"

namespace eng {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string shape_str(const Shape& s);

// A message's parts as text, without iostreams (whose locale machinery is most of a lean static program: docs/
// embedding.md): strings as they are, characters as one character, bool as 1 or 0, integers in decimal, floating
// point as printf's %g (6 significant digits), shapes as [2, 3], dtypes by name, pointers in hex: what
// `std::ostream <<` wrote, except that 8-bit integers read as numbers, not characters.
inline void append_part(std::string& out, std::string_view s) { out += s; }
inline void append_part(std::string& out, const char* s) { out += s ? s : "(null)"; }
inline void append_part(std::string& out, char c) { out += c; }
inline void append_part(std::string& out, const Shape& s) { out += shape_str(s); }
inline void append_part(std::string& out, DType t) { out += dtype_name(t); }
inline void append_part(std::string& out, const void* p) {
  char buf[2 + 2 * sizeof p] = {'0', 'x'};
  out.append(buf, std::to_chars(buf + 2, buf + sizeof buf, reinterpret_cast<uintptr_t>(p), 16).ptr);
}
// printf's %.*g of v, in the classic locale whatever the program's: what JSON and configuration files need.
// (printf, with the locale's decimal point made a '.': to_chars would add 120 KB of tables to a static program.)
std::string general_text(double v, int significant);
template <class T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, char>, int> = 0>
void append_part(std::string& out, T v) {
  char buf[64];
  if constexpr (std::is_floating_point_v<T>) {  // printf: its code is in every program already, to_chars' tables not
    out.append(buf, size_t(std::snprintf(buf, sizeof buf, "%g", double(v))));
  } else {
    std::to_chars_result r;
    if constexpr (std::is_same_v<T, bool>)
      r = std::to_chars(buf, buf + sizeof buf, int(v));
    else
      r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
  }
}

// The handler of failed checks in a build without exceptions; it may end the process its own way. When it returns,
// the process aborts: the code after a failed check cannot run. The default prints the message to stderr.
using ErrorHandler = void (*)(const char* message, void* user);
void set_error_handler(ErrorHandler handler, void* user);  // null: the default
[[noreturn]] void fail_without_exceptions(const std::string& message);  // calls the handler, then aborts

// The parts of a message as one string (append_part above).
template <class... Parts>
std::string str_cat(Parts&&... parts) {
  std::string s;
  (append_part(s, std::forward<Parts>(parts)), ...);
  return s;
}

template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
#if defined(__cpp_exceptions)
  throw Error(str_cat(std::forward<Parts>(parts)...));
#else
  fail_without_exceptions(str_cat(std::forward<Parts>(parts)...));
#endif
}

}  // namespace eng

#define ENG_CHECK(cond, ...)                    \
  do {                                          \
    if (!(cond)) ::eng::fail(__VA_ARGS__);      \
  } while (0)
