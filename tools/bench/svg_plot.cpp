#include "tools/bench/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/safe_text.h"

namespace eng::bench {

namespace {

// One axis: the data range widened to whole decades (log) or to a multiple of a 1-2-5 step (linear), so that
// grid lines fall on round values; `at` maps a value to [0, 1].
struct Axis {
  bool log;
  double lo, hi, step;  // in log10 units when log

  Axis(bool log_scale, double min, double max) : log(log_scale) {
    if (log) {
      lo = std::floor(std::log10(min)), hi = std::max(lo + 1, std::ceil(std::log10(max))), step = 1;
      return;
    }
    // A flat or nearly flat range is widened until its ticks differ at double precision (1e17 and 1e17 + 16
    // would otherwise have a step below the spacing of doubles there).
    const double least = std::max(std::abs(min), std::abs(max)) * 1e-9;
    if (max - min <= least) max = min + std::max(1.0, least);
    const double raw = (max - min) / 5, mag = std::pow(10, std::floor(std::log10(raw)));
    step = raw / mag < 1.5 ? mag : raw / mag < 3.5 ? 2 * mag : raw / mag < 7.5 ? 5 * mag : 10 * mag;
    lo = std::floor(min / step) * step, hi = std::ceil(max / step) * step;
  }
  double at(double v) const { return ((log ? std::log10(v) : v) - lo) / (hi - lo); }
  bool plottable(double v) const { return !log || v > 0; }
  std::vector<std::pair<double, std::string>> ticks() const {
    std::vector<std::pair<double, std::string>> t;
    const int64_t n = std::llround((hi - lo) / step);
    for (int64_t i = 0; i <= n; ++i) {
      const double e = lo + double(i) * step;
      std::ostringstream s;
      if (log)
        s << "1e" << e;
      else
        s << (std::abs(e) < step / 2 ? 0.0 : e);
      t.emplace_back(log ? std::pow(10, e) : e, s.str());
    }
    return t;
  }
};

}  // namespace

void write_svg_plot(const std::string& path, const std::string& title, const std::string& x_label,
                    const std::string& y_label, const std::vector<Series>& series, Axes axes) {
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  auto keep = [&](double x, double y) { return (!axes.log_x || x > 0) && (!axes.log_y || y > 0) && std::isfinite(y); };
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size(); ++i)
      if (keep(s.x[i], s.y[i])) {
        x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
        y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
      }
  ENG_CHECK(x0 <= x1, "svg plot '", path, "': no points to plot");
  ENG_CHECK(std::isfinite(x1 - x0) && std::isfinite(y1 - y0), "svg plot '", path, "': the values span [", x0, ", ",
            x1, "] x [", y0, ", ", y1, "], wider than a double can hold");
  const Axis ax(axes.log_x, x0, x1), ay(axes.log_y, y0, y1);
  const double W = 640, H = 420, L = 70, R = 160, T = 40, B = 50;
  auto px = [&](double x) { return L + ax.at(x) * (W - L - R); };
  auto py = [&](double y) { return H - B - ay.at(y) * (H - T - B); };
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' font-family='sans-serif' "
    << "font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  o << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='14'>" << xml_text(title) << "</text>\n";
  for (const auto& [v, label] : ax.ticks())
    o << "<line x1='" << px(v) << "' y1='" << T << "' x2='" << px(v) << "' y2='" << H - B << "' stroke='#ddd'/><text x='"
      << px(v) << "' y='" << H - B + 16 << "' text-anchor='middle'>" << label << "</text>\n";
  for (const auto& [v, label] : ay.ticks())
    o << "<line x1='" << L << "' y1='" << py(v) << "' x2='" << W - R << "' y2='" << py(v) << "' stroke='#ddd'/><text x='"
      << L - 6 << "' y='" << py(v) + 4 << "' text-anchor='end'>" << label << "</text>\n";
  o << "<text x='" << (L + W - R) / 2 << "' y='" << H - 12 << "' text-anchor='middle'>" << xml_text(x_label)
    << "</text>\n";
  o << "<text transform='translate(16," << (T + H - B) / 2 << ") rotate(-90)' text-anchor='middle'>"
    << xml_text(y_label) << "</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const char* c = colors[s % 8];
    const Series& se = series[s];
    o << "<polyline fill='none' stroke='" << c << "' stroke-width='2' points='";
    for (size_t i = 0; i < se.x.size(); ++i)
      if (keep(se.x[i], se.y[i])) o << px(se.x[i]) << "," << py(se.y[i]) << " ";
    o << "'/>\n";
    if (se.x.size() <= 40)  // markers only where they stay readable
      for (size_t i = 0; i < se.x.size(); ++i)
        if (keep(se.x[i], se.y[i]))
          o << "<circle cx='" << px(se.x[i]) << "' cy='" << py(se.y[i]) << "' r='3' fill='" << c << "'/>\n";
    o << "<text x='" << W - R + 10 << "' y='" << T + 16 * (s + 1) << "' fill='" << c << "'>" << xml_text(se.name)
      << "</text>\n";
  }
  o << "</svg>\n";
  const std::string text = o.str();
  write_file_atomic(path, std::vector<uint8_t>(text.begin(), text.end()), "svg plot");
}

}  // namespace eng::bench
