// bench curves: training curves of several `train --log` CSV files in one SVG, e.g. the Reformer paper's
// Figure 2 (the copy task learned with LSH attention of 1 and 4 rounds beside full and linear attention).
// Each file is one series, named by its file name (or NAME=FILE); the y value is the chosen column (loss or
// accuracy) of the chosen row kind (train or eval), against the step.
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cli.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/parse_number.h"
#include "engine/safe_text.h"
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

// A value of the log: a finite number, or the nan / inf that train writes for a diverged loss, kept as a point
// the plot leaves out.
double log_value(const std::string& text, const std::string& what) {
  if (text == "nan" || text == "-nan") return std::numeric_limits<double>::quiet_NaN();
  if (text == "inf" || text == "-inf") return text[0] == '-' ? -HUGE_VAL : HUGE_VAL;
  return parse_real(text, RealRange{}, what);
}

// The (step, value) points of one log: rows whose kind column is `kind`, the value from column `column`.
// Text from the file is quoted through terminal_text: it reaches the terminal in messages.
bench::Series read_log(const std::string& spec, const std::string& kind, const std::string& column) {
  const size_t eq = spec.find('=');
  const std::string path = eq == std::string::npos ? spec : spec.substr(eq + 1);
  bench::Series s;
  s.name = eq == std::string::npos ? path.substr(path.find_last_of('/') + 1) : spec.substr(0, eq);
  const std::string shown = terminal_text(path);
  const std::vector<uint8_t> bytes = read_file_bytes(path, "bench curves");
  const std::vector<std::string> lines = split(std::string(bytes.begin(), bytes.end()), '\n');
  ENG_CHECK(!lines.empty() && !lines[0].empty(), "bench curves: ", shown, " is empty (not a train --log file)");
  const std::string shown_header = terminal_text(lines[0].substr(0, 200));
  const std::vector<std::string> header = split(lines[0], ',');
  int step_col = -1, kind_col = -1, value_col = -1;
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == "step") step_col = int(i);
    if (header[i] == "kind") kind_col = int(i);
    if (header[i] == column) value_col = int(i);
  }
  ENG_CHECK(step_col >= 0 && kind_col >= 0, "bench curves: ", shown, " has no step and kind columns (header '",
            shown_header, "'): not a train --log file");
  ENG_CHECK(value_col >= 0, "bench curves: ", shown, " has no column '", terminal_text(column), "' (header '",
            shown_header, "')");
  for (size_t row = 1; row < lines.size(); ++row) {
    if (row + 1 == lines.size() && lines[row].empty()) break;  // the newline that ends the last row
    const std::vector<std::string> f = split(lines[row], ',');
    const std::string where = "bench curves: " + shown + ":" + std::to_string(row + 1);
    ENG_CHECK(f.size() == header.size(), where, ": ", f.size(), " fields, the header has ", header.size());
    if (f[size_t(kind_col)] != kind) continue;
    s.x.push_back(parse_real(f[size_t(step_col)], RealRange{}, where + ": step"));
    s.y.push_back(log_value(f[size_t(value_col)], where + ": " + terminal_text(column)));
  }
  ENG_CHECK(!s.x.empty(), "bench curves: ", shown, " has no '", terminal_text(kind), "' rows");
  return s;
}

int run(int argc, char** argv) {
  Cli cli("bench curves", "Training curves of several train --log CSV files in one SVG.");
  auto& kind = cli.add_string("kind", "eval", "rows to plot: train or eval");
  auto& column = cli.add_string("column", "loss", "the value to plot: loss or accuracy (any column of the log)");
  auto& svg = cli.add_string("svg", "", "output SVG file");
  auto& title = cli.add_string("title", "Training curves", "the plot's title");
  auto& log_y = cli.add_bool("log-y", true, "logarithmic y axis");
  cli.add_positionals("[NAME=]LOG.csv ...", "train --log files, one series each, named NAME or by the file's name");
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(!svg.empty(), "bench curves: --svg OUT.svg is required (", cli.usage(), ")");
  ENG_CHECK(!cli.positional().empty(), "bench curves: no log files given (", cli.usage(), ")");
  std::vector<bench::Series> series;
  for (const std::string& spec : cli.positional()) {
    const std::string path = spec.substr(spec.find('=') == std::string::npos ? 0 : spec.find('=') + 1);
    ENG_CHECK(!same_file(svg, path), "bench curves: --svg ", terminal_text(svg), " is the log ", terminal_text(path),
              " it reads: refusing to write over it (give --svg another path)");
  }
  for (const std::string& spec : cli.positional()) {
    series.push_back(read_log(spec, kind, column));
    const bench::Series& s = series.back();
    std::printf("%-24s %zu points, %s %s: first %.4g, last %.4g (step %.0f)\n", terminal_text(s.name).c_str(),
                s.x.size(), terminal_text(kind).c_str(), terminal_text(column).c_str(), s.y.front(), s.y.back(),
                s.x.back());
  }
  bench::write_svg_plot(svg, title, "step", kind + " " + column, series, bench::Axes{false, log_y});
  std::printf("wrote %s\n", svg.c_str());
  return 0;
}

}  // namespace

ENG_REGISTER_BENCH("curves", "training curves of train --log CSV files in one SVG (e.g. Reformer's Figure 2)", run);
