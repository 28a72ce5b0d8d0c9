// The main() of every tool: run it, and turn what it throws into one line on stderr, "error: <message>", with exit
// status 1. The message goes through terminal_text (engine/safe_text.h): it may quote a name or a string read from
// a file. Out of memory gets the tool's own advice (what to lower).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

#include "engine/error.h"
#include "engine/safe_text.h"

namespace eng {

// Registers the attention variants the program can build (models/attention/variants.h): every one
// (tools/registration/all_variants.cpp), or the list a lean build of embed names (`make embed VARIANTS=...`).
void register_program_variants();

#if defined(__cpp_exceptions)
template <class Run>
int tool_main(Run&& run, const std::string& out_of_memory) {
  register_program_variants();
  try {
    return run();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: %s\n", out_of_memory.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", terminal_text(e.what()).c_str());
  }
  return 1;
}
#else
// Without exceptions (the lean embed): a failed check reaches the error handler (engine/error.h), and operator new
// that finds no memory the new-handler; each prints the same line as above and exits with status 1.
template <class Run>
int tool_main(Run&& run, const std::string& out_of_memory) {
  static std::string oom;
  oom = out_of_memory;
  std::set_new_handler([] {
    std::fprintf(stderr, "error: %s\n", oom.c_str());
    std::exit(1);
  });
  set_error_handler([](const char* message, void*) {
    std::fprintf(stderr, "error: %s\n", terminal_text(message).c_str());
    std::exit(1);
  }, nullptr);
  register_program_variants();
  return run();
}
#endif

}  // namespace eng
