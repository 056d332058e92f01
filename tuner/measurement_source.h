// Where a sweep's measurements come from.  The search loop (tuner/sweep.cpp)
// proposes configs, hands each to a source, and records what comes back; it
// never asks which source it has (Kernel Tuner's runners, its simulation
// runner included, do the same):
//   gpu_measurements      compiles on a thread pool (binaries cached in the
//                         database) and validates and times in the worker
//                         process;
//   replayed_measurements serves a recorded sweep (tuner/replay.h): no GPU,
//                         no compilation;
//   compiled_only         compiles and reports resources; times nothing.
#pragma once
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/space.h"
#include "tuner/sweep_report.h"
#include "tuner/timing.h"

namespace mlatune {

class ReplayData;
class Worker;

/// The source of a sweep's measurements.  The sweep calls prepare() for each
/// candidate as it is proposed, at most lookahead() ahead, and measure() for
/// the same candidates in the same order.
class MeasurementSource {
 public:
  virtual ~MeasurementSource() = default;

  /// Compile threads behind this source; 0 when it compiles nothing.
  virtual unsigned compile_threads() const = 0;
  /// How many candidates may be prepared ahead of the one being measured,
  /// so that work on them (compilation) overlaps the measurement; adaptive
  /// strategies see results with at most this lag.
  virtual std::size_t lookahead() const = 0;
  /// Where the measurements come from when they are not taken now (the
  /// recorded sweep's name), for the run's record; nullopt otherwise.
  virtual std::optional<std::string> origin() const = 0;

  /// Starts work on a candidate that measure() will be asked for later.
  virtual void prepare(const Config& config, const Shape& shape) = 0;
  /// Before the first measurement at a shape that has candidates; may draw
  /// from `rng` (inputs) and add its setup to `report`.
  virtual void begin_shape(const Shape& shape, std::mt19937_64& rng, ShapeReport& report) = 0;
  /// Measures the oldest prepared candidate, which is `config`; time spent
  /// waiting goes into `report`.  The sweep sets the report's config text.  "Cannot run" is an outcome; exceptions are
  /// for a broken environment.
  virtual CandidateReport measure(const Config& config, const Shape& shape, const Cutoff& cutoff,
                                  ShapeReport& report) = 0;
  /// Times the ok candidates of the current shape named in `configs` again,
  /// interleaved; one entry each, empty where it could not be re-timed.
  virtual std::vector<std::optional<TimingStats>> retime(const std::vector<std::string>& configs,
                                                         int rounds, ShapeReport& report) = 0;
  /// At the end: NVRTC runs, binaries reused, worker replacements.
  virtual void add_totals(SweepReport& report) const = 0;
};

/// Where and how candidates are compiled.
struct CompileSettings {
  std::filesystem::path database;  // binaries are cached here
  std::string arch;                // "sm_90"
  unsigned jobs = 0;               // compile threads; 0: one per core
};

/// Compiles through a pool and measures in `worker`, which must already
/// report a usable GPU; `space_file` is what the worker loads.  The space
/// and the worker must outlive the source.
std::unique_ptr<MeasurementSource> gpu_measurements(const SearchSpace& space,
                                                    const std::filesystem::path& space_file,
                                                    const CompileSettings& compile,
                                                    const TimingOptions& timing, Worker& worker);

/// Serves `data` (named `name` in messages and records); it must outlive the source.
std::unique_ptr<MeasurementSource> replayed_measurements(const ReplayData& data, std::string name);

/// Compiles every candidate and reports its compilation (outcome ok or
/// compile_error, resources, CompileSummary); times nothing.
std::unique_ptr<MeasurementSource> compiled_only(const SearchSpace& space, const CompileSettings& compile);

}  // namespace mlatune
