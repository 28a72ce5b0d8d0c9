// The bench tool's subcommands register themselves here, one file each under tools/bench/.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace eng::bench {

using BenchMain = std::function<int(int argc, char** argv)>;  // argv[1] is the subcommand's name

bool register_bench(const std::string& name, const std::string& description, BenchMain fn);

}  // namespace eng::bench

#define ENG_BENCH_CONCAT2(a, b) a##b
#define ENG_BENCH_CONCAT(a, b) ENG_BENCH_CONCAT2(a, b)
#define ENG_REGISTER_BENCH(name, description, fn) \
  static const bool ENG_BENCH_CONCAT(eng_bench_registered_, __LINE__) = ::eng::bench::register_bench(name, description, fn)
