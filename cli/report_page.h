// The page `mlatune report` writes: one self-contained HTML file (inline CSS
// and SVG, no script, nothing fetched) about a database: the best configs,
// the runs, and per kernel, device and shape the time against each
// parameter's values, the spread of repeated timings, and each search's
// progress.  The data comes in as values (ReportInput); this file only lays
// it out.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/store.h"

namespace mlatune::cli {

/// A space's parameters and their values, in the order the space lists them.
using ParameterOrder = std::vector<std::pair<std::string, std::vector<std::string>>>;

struct ReportInput {
  std::filesystem::path database;
  StoreInfo info;
  std::vector<RunRecord> runs;
  std::vector<BestRecord> best;
  std::vector<MeasurementRecord> measurements;  // in the order they were recorded
  /// With --space: its parameters, so that plots follow the space's order;
  /// else the names and values found in the config texts.
  std::optional<ParameterOrder> parameters;
  /// What was left out and why (e.g. "only fused_mla_attention"), for the header.
  std::string scope;
};

/// How many of the fastest configs of a shape the spread plot shows.
inline constexpr std::size_t report_spread_rows = 20;

/// The whole page.
std::string report_html(const ReportInput& input);

}  // namespace mlatune::cli
