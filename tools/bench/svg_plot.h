// Line plots written as standalone SVG files, for the benchmarks' figures (no dependency): each axis linear or
// logarithmic.
#pragma once
#include <string>
#include <vector>

namespace eng::bench {

struct Series {
  std::string name;
  std::vector<double> x, y;  // points with y <= 0 on a log axis are skipped (not measured)
};

struct Axes {
  bool log_x = true, log_y = true;
};

// Writes the plot to `path` atomically (engine/file_io.h's write_file_atomic); throws naming the file on failure.
// The title, the labels and the series' names may come from file names and flags: they are written as text,
// escaped (engine/safe_text.h's xml_text), never as markup.
void write_svg_plot(const std::string& path, const std::string& title, const std::string& x_label,
                    const std::string& y_label, const std::vector<Series>& series, Axes axes);

inline void write_loglog_svg(const std::string& path, const std::string& title, const std::string& x_label,
                             const std::string& y_label, const std::vector<Series>& series) {
  write_svg_plot(path, title, x_label, y_label, series, Axes{});
}

}  // namespace eng::bench
