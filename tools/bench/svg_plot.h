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

// Writes the plot to `path` atomically (temporary file, then rename); throws naming the file on failure.
void write_svg_plot(const std::string& path, const std::string& title, const std::string& x_label,
                    const std::string& y_label, const std::vector<Series>& series, Axes axes);

inline void write_loglog_svg(const std::string& path, const std::string& title, const std::string& x_label,
                             const std::string& y_label, const std::vector<Series>& series) {
  write_svg_plot(path, title, x_label, y_label, series, Axes{});
}

}  // namespace eng::bench
