// bench curves: training curves of several `train --log` CSV files in one SVG, e.g. the Reformer paper's
// Figure 2 (the copy task learned with LSH attention of 1 and 4 rounds beside full and linear attention).
// Each file is one series, named by its file name (or NAME=FILE); the y value is the chosen column (loss or
// accuracy) of the chosen row kind (train or eval), against the step.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cli.h"
#include "engine/error.h"
#include "tools/bench.h"
#include "tools/bench/svg_plot.h"

using namespace eng;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, sep);) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

// The (step, value) points of one log: rows whose kind column is `kind`, the value from column `column`.
bench::Series read_log(const std::string& spec, const std::string& kind, const std::string& column) {
  const size_t eq = spec.find('=');
  const std::string path = eq == std::string::npos ? spec : spec.substr(eq + 1);
  bench::Series s;
  s.name = eq == std::string::npos ? path.substr(path.find_last_of('/') + 1) : spec.substr(0, eq);
  std::ifstream in(path);
  ENG_CHECK(in, "bench curves: cannot read ", path);
  std::string line;
  ENG_CHECK(std::getline(in, line), "bench curves: ", path, " is empty (not a train --log file)");
  const std::vector<std::string> header = split(line, ',');
  int step_col = -1, kind_col = -1, value_col = -1;
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == "step") step_col = int(i);
    if (header[i] == "kind") kind_col = int(i);
    if (header[i] == column) value_col = int(i);
  }
  ENG_CHECK(step_col >= 0 && kind_col >= 0, "bench curves: ", path, " has no step and kind columns (header '", line,
            "'): not a train --log file");
  ENG_CHECK(value_col >= 0, "bench curves: ", path, " has no column '", column, "' (header '", line, "')");
  for (int64_t row = 2; std::getline(in, line); ++row) {
    const std::vector<std::string> f = split(line, ',');
    ENG_CHECK(f.size() == header.size(), "bench curves: ", path, ":", row, ": ", f.size(), " fields, the header has ",
              header.size());
    if (f[size_t(kind_col)] != kind) continue;
    try {
      s.x.push_back(std::stod(f[size_t(step_col)]));
      s.y.push_back(std::stod(f[size_t(value_col)]));
    } catch (const std::exception&) {
      fail("bench curves: ", path, ":", row, ": step '", f[size_t(step_col)], "' or ", column, " '",
           f[size_t(value_col)], "' is not a number");
    }
  }
  ENG_CHECK(!s.x.empty(), "bench curves: ", path, " has no '", kind, "' rows");
  return s;
}

int run(int argc, char** argv) {
  Cli cli("bench curves", "Training curves of several train --log CSV files in one SVG.");
  auto& kind = cli.add_string("kind", "eval", "rows to plot: train or eval");
  auto& column = cli.add_string("column", "loss", "the value to plot: loss or accuracy (any column of the log)");
  auto& svg = cli.add_string("svg", "", "output SVG file");
  auto& title = cli.add_string("title", "Training curves", "the plot's title");
  auto& log_y = cli.add_bool("log-y", true, "logarithmic y axis");
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(!svg.empty() && !cli.positional().empty(), "bench curves: usage: bench curves --svg OUT.svg "
            "[NAME=]LOG.csv ...");
  std::vector<bench::Series> series;
  for (const std::string& spec : cli.positional()) {
    series.push_back(read_log(spec, kind, column));
    const bench::Series& s = series.back();
    std::printf("%-24s %zu points, %s %s: first %.4g, last %.4g (step %.0f)\n", s.name.c_str(), s.x.size(),
                kind.c_str(), column.c_str(), s.y.front(), s.y.back(), s.x.back());
  }
  bench::write_svg_plot(svg, title, "step", kind + " " + column, series, bench::Axes{false, log_y});
  std::printf("wrote %s\n", svg.c_str());
  return 0;
}

}  // namespace

ENG_REGISTER_BENCH("curves", "training curves of train --log CSV files in one SVG (e.g. Reformer's Figure 2)", run);
