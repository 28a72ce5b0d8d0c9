#include "tools/bench/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/error.h"

namespace eng::bench {

void write_loglog_svg(const std::string& path, const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series) {
  double x0 = 1e300, x1 = 0, y0 = 1e300, y1 = 0;
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size(); ++i)
      if (s.y[i] > 0 && s.x[i] > 0) {
        x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
        y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
      }
  ENG_CHECK(x1 > 0, "svg plot '", path, "': no points to plot");
  // Whole decades on both axes, so the grid lines fall on powers of ten.
  const double lx0 = std::floor(std::log10(x0)), lx1 = std::max(lx0 + 1, std::ceil(std::log10(x1)));
  const double ly0 = std::floor(std::log10(y0)), ly1 = std::max(ly0 + 1, std::ceil(std::log10(y1)));
  const double W = 640, H = 420, L = 70, R = 160, T = 40, B = 50;
  auto px = [&](double x) { return L + (std::log10(x) - lx0) / (lx1 - lx0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (std::log10(y) - ly0) / (ly1 - ly0) * (H - T - B); };
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' font-family='sans-serif' "
    << "font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  o << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='14'>" << title << "</text>\n";
  for (double e = lx0; e <= lx1; ++e)
    o << "<line x1='" << px(std::pow(10, e)) << "' y1='" << T << "' x2='" << px(std::pow(10, e)) << "' y2='" << H - B
      << "' stroke='#ddd'/><text x='" << px(std::pow(10, e)) << "' y='" << H - B + 16
      << "' text-anchor='middle'>1e" << e << "</text>\n";
  for (double e = ly0; e <= ly1; ++e)
    o << "<line x1='" << L << "' y1='" << py(std::pow(10, e)) << "' x2='" << W - R << "' y2='" << py(std::pow(10, e))
      << "' stroke='#ddd'/><text x='" << L - 6 << "' y='" << py(std::pow(10, e)) + 4 << "' text-anchor='end'>1e" << e
      << "</text>\n";
  o << "<text x='" << (L + W - R) / 2 << "' y='" << H - 12 << "' text-anchor='middle'>" << x_label << "</text>\n";
  o << "<text transform='translate(16," << (T + H - B) / 2 << ") rotate(-90)' text-anchor='middle'>" << y_label
    << "</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const char* c = colors[s % 8];
    o << "<polyline fill='none' stroke='" << c << "' stroke-width='2' points='";
    for (size_t i = 0; i < series[s].x.size(); ++i)
      if (series[s].y[i] > 0) o << px(series[s].x[i]) << "," << py(series[s].y[i]) << " ";
    o << "'/>\n";
    for (size_t i = 0; i < series[s].x.size(); ++i)
      if (series[s].y[i] > 0)
        o << "<circle cx='" << px(series[s].x[i]) << "' cy='" << py(series[s].y[i]) << "' r='3' fill='" << c << "'/>\n";
    o << "<text x='" << W - R + 10 << "' y='" << T + 16 * (s + 1) << "' fill='" << c << "'>" << series[s].name
      << "</text>\n";
  }
  o << "</svg>\n";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << o.str();
    ENG_CHECK(f.good(), "svg plot: cannot write '", tmp, "'");
  }
  ENG_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "svg plot: cannot rename '", tmp, "' to '", path, "'");
}

}  // namespace eng::bench
