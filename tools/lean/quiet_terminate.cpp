// The lean embed's terminate handler, in place of libstdc++'s verbose one, which demangles the escaping exception's
// type name: its demangler is 45 KB of the static program (docs/embedding.md). std::set_terminate could not drop
// it: the default handler is the initial value of libstdc++'s __cxxabiv1::__terminate_handler, defined with it in
// one archive member, so a static program defining that variable itself never links that member. Linked into the
// static lean embed only (Makefile); std::terminate is reached only when an exception escapes a thread or a noexcept
// function (tool_main catches those of the main thread).
#include <cstdio>
#include <cstdlib>
#include <exception>

namespace {

[[noreturn]] void quiet_terminate() {
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::fprintf(stderr, "terminate called after an exception: %s\n", x.what());
    } catch (...) {
      std::fputs("terminate called after an exception that is not a std::exception\n", stderr);
    }
  } else {
    std::fputs("terminate called without an active exception\n", stderr);
  }
  std::abort();
}

}  // namespace

namespace __cxxabiv1 {
extern std::terminate_handler __terminate_handler;
std::terminate_handler __terminate_handler = quiet_terminate;
}  // namespace __cxxabiv1
