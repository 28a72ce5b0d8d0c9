// The main() of every tool: run it, and turn what it throws into one line on stderr, "error: <message>", with exit
// status 1. The message goes through terminal_text (engine/safe_text.h): it may quote a name or a string read from
// a file. Out of memory gets the tool's own advice (what to lower).
#pragma once
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "engine/safe_text.h"

namespace eng {

// Registers the attention variants the program can build (models/attention/variants.h): every one
// (tools/registration/all_variants.cpp), or the list a lean build of embed names (`make embed VARIANTS=...`).
void register_program_variants();

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

}  // namespace eng
