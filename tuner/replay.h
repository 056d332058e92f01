// Replayed measurements: a recorded sweep (a CSV file such as
// tests/data/h200_sweeps.csv) served in place of a GPU, so that search
// strategies can be run and compared anywhere, CI included.
//
// The CSV (RFC 4180 quoting; lines starting with # are comments) has a header
// naming at least the columns shape, config, outcome and median_us.  Shapes
// and configs are parsed against the search space as they are read, so a
// lookup compares typed values, not spellings.  A file whose name ends in .gz
// is gzip-compressed (large exhaustive fixtures).
//
// A comment line "# where: EXPR" before the header states a restriction: the recording
// measured only the configs of the space that satisfy EXPR (a constraint
// over parameters and shape variables, as `tune --where` takes), e.g. those
// that existed when it was recorded.  Replays search the space restricted so
// (ReplayData::restriction), the same mechanism for every fixture, whatever
// its shapes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/outcome.h"
#include "core/space.h"
#include "tuner/strategy.h"

namespace mlatune {

/// One record of a CSV file: its fields, unquoted, and the line it starts on.
struct CsvRow {
  std::vector<std::string> fields;
  int line = 0;
};

/// Splits CSV text into rows (RFC 4180: fields in double quotes may hold
/// commas, newlines and doubled quotes).  Lines whose first character is #
/// and empty lines are skipped.  An unterminated quote or text after a
/// closing quote is an InputError at file:line:col.
std::vector<CsvRow> parse_csv(std::string_view text, const std::string& file_name);

/// The measurements of a recorded sweep, by shape and config.  Refers to the
/// space it was read with (for messages): the space must outlive it.
class ReplayData {
 public:
  /// Reads a CSV file; EnvironmentError when it cannot be read, InputError
  /// (file:line) for a malformed row, an unknown shape or config, or a
  /// (shape, config) recorded twice.
  static ReplayData load(const std::filesystem::path& file, const SearchSpace& space);
  static ReplayData parse(std::string_view text, const std::string& file_name,
                          const SearchSpace& space);

  /// The constraints of the file's "# where:" lines, in order: replays
  /// search the space restricted by them (SearchSpace::restrict).
  const std::vector<std::string>& restriction() const { return restriction_; }
  /// The shapes measured, in order.
  std::vector<Shape> shapes() const;
  /// Configs measured at `shape` (0 for a shape not in the data).
  std::size_t size(const Shape& shape) const;
  bool contains(const Shape& shape, const Config& config) const;
  /// The median time in microseconds, or nullopt when the config did not run
  /// correctly (any outcome but ok).  A config absent from the data is an
  /// InputError: replay serves exhaustive sweeps.
  std::optional<double> time(const Shape& shape, const Config& config) const;
  /// The recorded outcome (ok, or why the config did not run correctly);
  /// InputError for a config absent from the data.
  Outcome outcome(const Shape& shape, const Config& config) const;
  /// The fastest ok time at `shape`; InputError when there is none.
  double optimum(const Shape& shape) const;
  /// The config of that time (the first in config order among equal ones).
  Config best_config(const Shape& shape) const;
  /// Every config measured at `shape` with its time (nullopt: it did not run
  /// correctly); empty for a shape not in the data.
  const std::map<Config, std::optional<double>>& measured(const Shape& shape) const;

 private:
  explicit ReplayData(const SearchSpace& space) : space_(&space) {}
  const SearchSpace* space_;
  std::map<Shape, std::map<Config, std::optional<double>>> measurements_;
  std::map<Shape, std::map<Config, Outcome>> outcomes_;
  std::vector<std::string> restriction_;
};

/// What replay() does with a proposed config the data lacks.
enum class Unrecorded {
  error,  // InputError: the data must be exhaustive at the shape
  skip,   // not evaluated, not counted, not told to the strategy: a search
          // over the recorded configs only (a fixture recording a sample);
          // with a lookahead it still takes a place among those in flight
};

/// What one strategy did against replayed data: the best time after each
/// evaluation, in order.
struct ReplayTrace {
  std::vector<double> best_after;  // +infinity until the first ok config
  /// Evaluations needed to come within `fraction` of `optimum` (0.03: within
  /// 3 %); nullopt when the trace never does.
  std::optional<std::size_t> evaluations_to_within(double optimum, double fraction) const;
  /// Best time after `evaluations` (or after all, when fewer were made).
  double best_after_evaluations(std::size_t evaluations) const;
};

/// Runs `strategy` against the data at `shape` for at most `budget`
/// evaluations: fewer when it exhausts the space, or once the best time is at
/// or below `stop_at` when given.  The strategy keeps its state, so a second
/// call continues the same search.  A proposed config the data lacks is as
/// `unrecorded` says.  With a `lookahead` above 1 the strategy is asked for
/// that many configs before it is told the first result, as a GPU sweep asks
/// while candidates compile (MeasurementSource::lookahead); proposals still
/// in flight when the replay stops are dropped, never measured.
ReplayTrace replay(Strategy& strategy, const ReplayData& data, const Shape& shape,
                   std::size_t budget, std::optional<double> stop_at = std::nullopt,
                   Unrecorded unrecorded = Unrecorded::error, std::size_t lookahead = 1);

}  // namespace mlatune
