// Replays every committed fuzz input (tests/fuzz/seeds/<target>/ and tests/fuzz/regressions/<target>/)
// through its target, so that the sanitizer run of the suite re-checks each one and a crash found by
// `make fuzz` stays fixed once its input is committed as a regression.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/fuzz/targets.h"

namespace fs = std::filesystem;

TEST_CASE("fuzz targets: every committed seed and regression input is read or refused, never a crash") {
  for (const auto& t : eng::fuzz::targets()) {
    size_t seeds = 0;
    for (const char* kind : {"seeds", "regressions"}) {
      const fs::path dir = fs::path("tests/fuzz") / kind / t.name;
      if (!fs::is_directory(dir)) continue;
      for (const auto& entry : fs::directory_iterator(dir)) {
        std::ifstream in(entry.path(), std::ios::binary);
        const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        INFO(entry.path().string());
        CHECK(t.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
        seeds += std::string(kind) == "seeds";
      }
    }
    INFO(t.name);
    CHECK(seeds > 0);  // run from the repository root (make test does)
  }
}
