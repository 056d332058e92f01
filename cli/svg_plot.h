// The report's plots as inline SVG (no script, no external file): a strip
// plot with boxes, a range plot and a step plot, all with a logarithmic time
// axis.  Each function returns one <svg> element; every text in it is
// escaped (cli/html.h), so labels may come straight from a database.
#pragma once
#include <string>
#include <vector>

namespace mlatune::cli {

/// One category of a strip plot (a parameter's value) and its times.
struct StripCategory {
  std::string label;
  std::vector<double> times_us;
};

/// Times per category: every time as a dot (at most `max_points` per
/// category, evenly chosen from the sorted times with the extremes kept), over
/// a box from the quartiles of all of them with the median marked.
std::string strip_plot(const std::string& title, const std::vector<StripCategory>& categories,
                       std::size_t max_points = 250);

/// One row of a range plot: a label, and low <= middle <= high.
struct RangeRow {
  std::string label;    // short, drawn at the left
  std::string tooltip;  // long, shown on hover (e.g. the config)
  double low_us = 0, middle_us = 0, high_us = 0;
};

/// One horizontal line per row from low to high, a dot at the middle.
std::string range_plot(const std::string& title, const std::vector<RangeRow>& rows);

/// One line of a step plot: y after each of 1, 2, .. n steps; NaN where
/// there is no value yet.
struct StepSeries {
  std::string label;
  std::vector<double> values_us;
};

/// Lines against the step index (1-based), with a legend.
std::string step_plot(const std::string& title, const std::string& x_label, const std::vector<StepSeries>& series);

}  // namespace mlatune::cli
