// The error handler of builds without exceptions (engine/error.h).
#include "engine/error.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace eng {
namespace {

void print_error(const char* message, void*) { std::fprintf(stderr, "error: %s\n", message); }

// Set once by an embedding program before it starts threads, read at each failure: atomics, not a lock, because
// a failing thread must not wait.
std::atomic<ErrorHandler> g_handler{print_error};
std::atomic<void*> g_user{nullptr};

}  // namespace

std::string general_text(double v, int significant) {
  char buf[64];
  const int n = std::snprintf(buf, sizeof buf, "%.*g", significant, v);
  // Everything %g writes is ASCII letters, digits and signs, but for the decimal point of the program's locale
  // (one byte or several), which becomes '.'.
  const auto plain = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '+' || c == '-';
  };
  std::string out;
  for (int i = 0; i < n;) {
    if (plain(buf[i])) {
      out += buf[i++];
      continue;
    }
    out += '.';
    while (i < n && !plain(buf[i])) ++i;
  }
  return out;
}

void set_error_handler(ErrorHandler handler, void* user) {
  g_user = user;
  g_handler = handler ? handler : print_error;
}

void fail_without_exceptions(const std::string& message) {
  g_handler.load()(message.c_str(), g_user.load());
  std::abort();
}

}  // namespace eng
