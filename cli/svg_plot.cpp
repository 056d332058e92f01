#include "cli/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "cli/html.h"

namespace mlatune::cli {
namespace {

// Colours that stay apart for the common kinds of colour blindness (Okabe-Ito).
constexpr const char* palette[] = {"#0072b2", "#e69f00", "#009e73", "#cc79a7",
                                   "#56b4e9", "#d55e00", "#f0e442", "#000000"};

constexpr double margin_left = 58, margin_right = 14, margin_top = 26, margin_bottom = 42;

/// A logarithmic time axis mapped onto [from, to] pixels (from may exceed to:
/// a vertical axis grows upwards).
class LogAxis {
 public:
  LogAxis(double min_us, double max_us, double from, double to) : from_(from), to_(to) {
    min_us = std::max(min_us, 1e-6);
    max_us = std::max(max_us, min_us);
    // Room above and below, and a span even when every time is the same.
    lo_ = std::log10(min_us) - 0.04 - (max_us == min_us ? 0.05 : 0);
    hi_ = std::log10(max_us) + 0.04 + (max_us == min_us ? 0.05 : 0);
  }
  double operator()(double us) const {
    const double t = (std::log10(std::max(us, 1e-6)) - lo_) / (hi_ - lo_);
    return from_ + t * (to_ - from_);
  }
  /// 1, 2 and 5 times the powers of ten inside the axis; at least its ends.
  std::vector<double> ticks() const {
    std::vector<double> out;
    for (int e = static_cast<int>(std::floor(lo_)); e <= static_cast<int>(std::ceil(hi_)); ++e)
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, e);
        if (std::log10(v) >= lo_ && std::log10(v) <= hi_) out.push_back(v);
      }
    if (out.size() < 2) out = {std::pow(10.0, lo_ + 0.04), std::pow(10.0, hi_ - 0.04)};
    return out;
  }

 private:
  double from_, to_, lo_, hi_;
};

std::string svg_open(double width, double height, const std::string& title) {
  return fmt::format(
      "<svg class=\"plot\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\">"
      "<title>{2}</title><text class=\"title\" x=\"{3}\" y=\"16\">{2}</text>",
      svg_number(width), svg_number(height), escape_html(title), svg_number(margin_left));
}

/// Horizontal grid lines and labels of a vertical time axis.
std::string vertical_time_axis(const LogAxis& y, double x0, double x1) {
  std::string out;
  for (double tick : y.ticks()) {
    const std::string at = svg_number(y(tick));
    out += fmt::format("<line class=\"grid\" x1=\"{0}\" y1=\"{2}\" x2=\"{1}\" y2=\"{2}\"/>", svg_number(x0),
                       svg_number(x1), at);
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", svg_number(x0 - 4),
                       svg_number(y(tick) + 3), escape_html(format_us(tick)));
  }
  out += fmt::format("<text class=\"axis\" x=\"12\" y=\"{0}\" transform=\"rotate(-90 12 {0})\" "
                     "text-anchor=\"middle\">time (µs, log)</text>",
                     svg_number((y(y.ticks().front()) + y(y.ticks().back())) / 2));
  return out;
}

/// Vertical grid lines and labels of a horizontal time axis at `y0`.
std::string horizontal_time_axis(const LogAxis& x, double y_top, double y0) {
  std::string out;
  for (double tick : x.ticks()) {
    const std::string at = svg_number(x(tick));
    out += fmt::format("<line class=\"grid\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>", at, svg_number(y_top),
                       svg_number(y0));
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", at,
                       svg_number(y0 + 14), escape_html(format_us(tick)));
  }
  return out;
}

double quantile(const std::vector<double>& sorted, double q) {
  const double at = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(at));
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (at - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

/// At most `limit` of `sorted`, evenly spread, the first and last kept.
std::vector<double> thinned(const std::vector<double>& sorted, std::size_t limit) {
  if (sorted.size() <= limit || limit < 2) return sorted;
  std::vector<double> out;
  for (std::size_t j = 0; j < limit; ++j)
    out.push_back(sorted[static_cast<std::size_t>(std::llround(static_cast<double>(j) *
                                                               static_cast<double>(sorted.size() - 1) /
                                                               static_cast<double>(limit - 1)))]);
  return out;
}

/// A label cut to `width` characters, the whole of it in a tooltip.
std::string short_label(const std::string& label, std::size_t width, double x, double y, const char* anchor) {
  const bool cut = label.size() > width;
  const std::string shown = cut ? label.substr(0, width - 1) + "…" : label;
  return fmt::format("<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"{}\">{}{}</text>", svg_number(x),
                     svg_number(y), anchor, cut ? "<title>" + escape_html(label) + "</title>" : std::string(),
                     escape_html(shown));
}

/// One category of a strip plot: box, whiskers, median, dots, label.
std::string strip_category(const StripCategory& category, const LogAxis& y, double center, double band,
                           double label_y, std::size_t max_points) {
  std::string out = short_label(category.label, 10, center, label_y, "middle");
  if (category.times_us.empty()) return out;
  std::vector<double> sorted = category.times_us;
  std::sort(sorted.begin(), sorted.end());
  const double half = band * 0.3;
  out += fmt::format("<line class=\"whisker\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>", svg_number(center),
                     svg_number(y(sorted.front())), svg_number(y(sorted.back())));
  const double q1 = y(quantile(sorted, 0.25)), q3 = y(quantile(sorted, 0.75));
  out += fmt::format("<rect class=\"box\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>", svg_number(center - half),
                     svg_number(q3), svg_number(2 * half), svg_number(std::max(q1 - q3, 0.5)));
  const std::string median = svg_number(y(quantile(sorted, 0.5)));
  out += fmt::format("<line class=\"median\" x1=\"{0}\" y1=\"{2}\" x2=\"{1}\" y2=\"{2}\"/>", svg_number(center - half),
                     svg_number(center + half), median);
  const std::vector<double> dots = thinned(sorted, max_points);
  for (std::size_t j = 0; j < dots.size(); ++j) {
    // A fixed jitter (golden-ratio steps), so that the same data draws the same page.
    const double jitter = (std::fmod(static_cast<double>(j) * 0.6180339887, 1.0) - 0.5) * band * 0.7;
    out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"1.6\"/>", svg_number(center + jitter), svg_number(y(dots[j])));
  }
  return out;
}

}  // namespace

std::string strip_plot(const std::string& title, const std::vector<StripCategory>& categories, std::size_t max_points) {
  constexpr double band = 64, height = 240;
  const double width = margin_left + band * static_cast<double>(std::max<std::size_t>(categories.size(), 2)) +
                       margin_right;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  bool thinned_any = false;
  for (const StripCategory& c : categories) {
    for (double t : c.times_us) lo = std::min(lo, t), hi = std::max(hi, t);
    thinned_any = thinned_any || c.times_us.size() > max_points;
  }
  if (hi == 0) lo = hi = 1;  // nothing to draw: an empty frame
  const LogAxis y(lo, hi, height - margin_bottom, margin_top);
  std::string out = svg_open(width, height, title);
  out += vertical_time_axis(y, margin_left, width - margin_right);
  for (std::size_t i = 0; i < categories.size(); ++i)
    out += strip_category(categories[i], y, margin_left + band * (static_cast<double>(i) + 0.5), band,
                          height - margin_bottom + 14, max_points);
  if (thinned_any)
    out += fmt::format("<text class=\"note\" x=\"{}\" y=\"{}\">dots: at most {} per value, evenly spread; boxes "
                       "and whiskers from all</text>",
                       svg_number(margin_left), svg_number(height - 6), max_points);
  return out + "</svg>";
}

std::string range_plot(const std::string& title, const std::vector<RangeRow>& rows) {
  constexpr double row_height = 16, width = 560, label_width = 40;
  const double height = margin_top + row_height * static_cast<double>(std::max<std::size_t>(rows.size(), 1)) + 24;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const RangeRow& r : rows) lo = std::min(lo, r.low_us), hi = std::max(hi, r.high_us);
  if (rows.empty()) lo = hi = 1;
  const double left = margin_left + label_width;
  const LogAxis x(lo, hi, left, width - margin_right);
  const double bottom = height - 24;
  std::string out = svg_open(width, height, title) + horizontal_time_axis(x, margin_top, bottom);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const RangeRow& r = rows[i];
    const double y = margin_top + row_height * (static_cast<double>(i) + 0.5);
    out += fmt::format("<g><title>{}</title>", escape_html(r.tooltip));
    out += short_label(r.label, 8, left - 6, y + 4, "end");
    out += fmt::format("<line class=\"range\" x1=\"{0}\" y1=\"{2}\" x2=\"{1}\" y2=\"{2}\"/>", svg_number(x(r.low_us)),
                       svg_number(std::max(x(r.high_us), x(r.low_us) + 1)), svg_number(y));
    out += fmt::format("<circle class=\"mid\" cx=\"{}\" cy=\"{}\" r=\"3\"/></g>", svg_number(x(r.middle_us)),
                       svg_number(y));
  }
  out += fmt::format("<text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">time (µs, log)</text>",
                     svg_number((left + width - margin_right) / 2), svg_number(height - 2));
  return out + "</svg>";
}

namespace {

/// A series as a step line (each value held until the next), one
/// <polyline> per stretch without gaps; only the steps where it changes.
std::string step_line(const StepSeries& s, const LogAxis& y, double left, double step_width, const char* colour) {
  std::string out, points;
  auto flush = [&] {
    if (!points.empty())
      out += fmt::format("<polyline class=\"step\" stroke=\"{}\" points=\"{}\"/>", colour, points);
    points.clear();
  };
  double held = std::numeric_limits<double>::quiet_NaN();
  for (std::size_t i = 0; i < s.values_us.size(); ++i) {
    const double v = s.values_us[i];
    const double x = left + step_width * static_cast<double>(i);
    if (std::isnan(v)) {
      flush();
    } else if (points.empty() || v != held) {
      if (!points.empty()) points += fmt::format(" {},{}", svg_number(x), svg_number(y(held)));
      points += fmt::format("{}{},{}", points.empty() ? "" : " ", svg_number(x), svg_number(y(v)));
    }
    held = v;
  }
  if (!points.empty() && !std::isnan(held))
    points += fmt::format(" {},{}", svg_number(left + step_width * static_cast<double>(s.values_us.size() - 1)),
                          svg_number(y(held)));
  flush();
  return out;
}

std::string legend(const std::vector<StepSeries>& series, double x, double y) {
  std::string out;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const double at = y + 14 * static_cast<double>(i);
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"3\" fill=\"{}\"/>", svg_number(x),
                       svg_number(at - 4), palette[i % std::size(palette)]);
    out += fmt::format("<text class=\"label\" x=\"{}\" y=\"{}\">{}</text>", svg_number(x + 14), svg_number(at),
                       escape_html(series[i].label));
  }
  return out;
}

}  // namespace

std::string step_plot(const std::string& title, const std::string& x_label, const std::vector<StepSeries>& series) {
  constexpr double width = 560, height = 260, legend_width = 150;
  std::size_t steps = 1;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const StepSeries& s : series) {
    steps = std::max(steps, s.values_us.size());
    for (double v : s.values_us)
      if (!std::isnan(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (hi == 0) lo = hi = 1;
  const double right = width - margin_right - legend_width;
  const LogAxis y(lo, hi, height - margin_bottom, margin_top);
  const double step_width = steps > 1 ? (right - margin_left) / static_cast<double>(steps - 1) : 0;
  std::string out = svg_open(width, height, title) + vertical_time_axis(y, margin_left, right);
  for (std::size_t i = 0; i < series.size(); ++i)
    out += step_line(series[i], y, margin_left, step_width, palette[i % std::size(palette)]);
  const double bottom = height - margin_bottom;
  for (std::size_t at : {std::size_t{1}, steps}) {
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                       svg_number(margin_left + step_width * static_cast<double>(at - 1)), svg_number(bottom + 14), at);
    if (steps == 1) break;
  }
  out += fmt::format("<text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                     svg_number((margin_left + right) / 2), svg_number(bottom + 30), escape_html(x_label));
  out += legend(series, right + 12, margin_top + 10);
  return out + "</svg>";
}

}  // namespace mlatune::cli
