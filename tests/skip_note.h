// A test that cannot run here (no GPU, a data set not installed) says so in one line, "skipped: ...", rather
// than in a doctest MESSAGE block, which reads like a failure report.
#pragma once
#include <iostream>
#include <string>

namespace eng::test {

inline void note_skip(const std::string& what) { std::cout << "skipped: " << what << std::endl; }

}  // namespace eng::test
