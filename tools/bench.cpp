// bench: performance measurements, one subcommand per file in tools/bench/. Each prints its figures
// beside a baseline measured in the same run where one can be, and no other: a figure from elsewhere would
// compare machines, not code.
#include "tools/bench.h"
#include "tools/heap_pad.h"
#include "tools/tool_main.h"

#include <cstdio>
#include <exception>
#include <map>
#include <new>
#include <utility>

namespace eng::bench {
namespace {

std::map<std::string, std::pair<std::string, BenchMain>>& registry() {
  static std::map<std::string, std::pair<std::string, BenchMain>> r;
  return r;
}

}  // namespace

bool register_bench(const std::string& name, const std::string& description, BenchMain fn) {
  registry()[name] = {description, std::move(fn)};
  return true;
}

}  // namespace eng::bench

int main(int argc, char** argv) {
  eng::pad_training_heap();
  const auto& reg = eng::bench::registry();
  const std::string sub = argc > 1 ? argv[1] : "";
  auto it = reg.find(sub);
  if (it == reg.end()) {
    std::FILE* out = sub == "--help" || sub == "-h" ? stdout : stderr;
    if (!sub.empty() && out == stderr) std::fprintf(stderr, "bench: unknown subcommand '%s'\n", sub.c_str());
    std::fprintf(out, "usage: bench <subcommand> [flags]   (bench <subcommand> --help for its flags)\n");
    for (const auto& [name, entry] : reg) std::fprintf(out, "  %-10s %s\n", name.c_str(), entry.first.c_str());
    return out == stdout ? 0 : 1;
  }
  return eng::tool_main([&] { return it->second.second(argc, argv); },
                   "bench " + sub + ": out of memory (lower the sizes its flags ask for)");
}
