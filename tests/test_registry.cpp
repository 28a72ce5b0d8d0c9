// Every registered differentiable op has a gradient check and a row in docs/ops.md.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "tests/gradcheck.h"

TEST_CASE("registry: every registered op has a gradient check") {
  const auto& checked = eng::test::gradcheck_names();
  auto ops = eng::registered_ops();
  REQUIRE(ops.size() > 10);
  for (const auto& [name, file] : ops)
    CHECK_MESSAGE(std::find(checked.begin(), checked.end(), name) != checked.end(), "op '", name, "' (", file,
                  ") has no GRADCHECK case");
  for (const auto& name : checked)
    CHECK_MESSAGE(std::any_of(ops.begin(), ops.end(), [&](const auto& o) { return o.first == name; }),
                  "GRADCHECK(\"", name, "\") names an op that is not registered");
}

TEST_CASE("registry: docs/ops.md lists every registered op") {
  std::ifstream f("docs/ops.md");
  REQUIRE_MESSAGE(f.good(), "docs/ops.md not found (run the tests from the repository root)");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string doc = ss.str();
  for (const auto& [name, file] : eng::registered_ops())
    CHECK_MESSAGE(doc.find("| `" + name + "` |") != std::string::npos, "docs/ops.md has no row for `", name, "`");
}
