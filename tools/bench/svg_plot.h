// A log-log line plot written as a standalone SVG file, for the benchmarks' figures (no dependency).
#pragma once
#include <string>
#include <vector>

namespace eng::bench {

struct Series {
  std::string name;
  std::vector<double> x, y;  // points with y <= 0 are skipped (not measured)
};

// Writes the plot to `path` atomically (temporary file, then rename); throws naming the file on failure.
void write_loglog_svg(const std::string& path, const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series);

}  // namespace eng::bench
