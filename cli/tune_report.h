// What `mlatune tune` prints: the summaries of a sweep and of a compile-only
// run, for people (stdout, diagnostics on stderr) and as JSON (--json), and
// the progress bar.  The sweep produces values (tuner/sweep_report.h); these
// only format them.
#pragma once
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/space.h"
#include "tuner/sweep_report.h"
#include "tuner/time_budget.h"

namespace mlatune::cli {

/// What a sweep's summary says besides the report itself.
struct SweepSummary {
  std::string kernel;
  DeviceInfo device;
  std::filesystem::path database;
  bool replayed = false;   // times come from a recorded sweep
  double cutoff_factor = 0;
  int cut_after = 0;
  double budget_ms = 0;
  std::string strategy;                   // as asked for: "auto", "bayes", ...
  std::optional<TimeBudget> time_budget;  // per shape
  std::string errors_by;                  // a parameter: kind errors per value (tune --errors-by)
};

/// The worst errors per validation input kind over a shape's ok configs
/// (ValidationStats::per_kind), for one value of a parameter (or all).
struct KindErrorRow {
  std::string group;               // the parameter's value; "all" without one
  int configs = 0;                 // ok configs with per-kind errors in the group
  std::vector<KindErrors> worst;   // per kind, in the order first seen
};

/// One row per value of parameter `by` (in the order first seen), or one
/// row "all" when `by` is empty; none when no ok config has per-kind errors
/// (a replay, or results from before they were recorded).
std::vector<KindErrorRow> kind_error_rows(const ShapeReport& shape, const std::string& by);

void print_sweep_text(const SweepReport& report, const SweepSummary& summary);
void print_sweep_json(const SweepReport& report, const SweepSummary& summary);

/// What a compile-only summary says besides the report itself.
struct CompileSummaryContext {
  const SearchSpace* space = nullptr;
  std::vector<Shape> shapes;            // parallel to the report's shapes
  std::string arch;
  std::string nvrtc_version;
  std::optional<DeviceInfo> device;     // the GPU, when one was found
  std::string no_device_reason;
  std::vector<std::string> notes;
  std::filesystem::path database;
};

/// Counts over a compile-only report's candidates.
struct CompileTotals {
  std::uint64_t configs = 0;
  std::uint64_t compiled = 0;
  std::uint64_t failed = 0;
  std::uint64_t spilling = 0;
  double compile_seconds = 0;  // sum over configs (CPU time of the compilations)
};

CompileTotals compile_totals(const SweepReport& report);

/// One table per shape on stdout, the first compile failure of each shape on
/// stderr, then the totals.
void print_compile_text(const SweepReport& report, const CompileSummaryContext& context);
void print_compile_json(const SweepReport& report, const CompileSummaryContext& context);

/// Progress on stderr: on a terminal one bar, redrawn at most ten times a
/// second (done/total, failures, best so far, rate, ETA); elsewhere one plain
/// line per event.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool terminal) : terminal_(terminal) {}
  void update(const SweepProgress& p);
  /// Ends the bar's line, if one is open.
  void finish();

 private:
  bool terminal_;
  bool open_ = false;
  std::string shape_;
  std::chrono::steady_clock::time_point drawn_{};
};

}  // namespace mlatune::cli
