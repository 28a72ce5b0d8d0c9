// Every registered differentiable op has a gradient check and a row in docs/ops.md.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "tests/gradcheck.h"

TEST_CASE("registry: every registered op has a gradient check") {
  const auto& checked = eng::test::gradcheck_names();
  auto ops = eng::registered_ops();
  REQUIRE(ops.size() > 10);
  for (const auto& op : ops)  // no structured bindings: clang 14 cannot capture them in doctest's macros
    CHECK_MESSAGE(std::find(checked.begin(), checked.end(), op.first) != checked.end(), "op '", op.first, "' (",
                  op.second, ") has no GRADCHECK case");
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
  for (const auto& op : eng::registered_ops())
    CHECK_MESSAGE(doc.find("| `" + op.first + "` |") != std::string::npos, "docs/ops.md has no row for `", op.first,
                  "`");
}
