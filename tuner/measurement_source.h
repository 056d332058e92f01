// Where a sweep's measurements come from.  The search loop (tuner/sweep.cpp)
// proposes configs, hands each to a source, and records what comes back; it
// never asks which source it has (Kernel Tuner's runners, its simulation
// runner included, do the same):
//   gpu_measurements      compiles on a thread pool (binaries cached in the
//                         database) and validates and times in worker
//                         processes, one per GPU (tuner/worker/pool.h), each
//                         taking the oldest compiled candidate when free;
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
#include "tuner/compile_pool.h"
#include "tuner/sweep_report.h"
#include "tuner/timing.h"

namespace mlatune {

class ReplayData;
class Worker;
class WorkerPool;

/// The source of a sweep's measurements.  The sweep calls prepare() for each
/// candidate as it is proposed, at most lookahead() ahead, and measure() for
/// the same candidates in the same order: a source may measure them in
/// another order (several GPUs), but hands the results back in this one, so
/// that a strategy sees them in an order that does not depend on timing.
class MeasurementSource {
 public:
  virtual ~MeasurementSource() = default;

  /// Compile threads behind this source; 0 when it compiles nothing.
  virtual unsigned compile_threads() const = 0;
  /// Whether those threads hand their work to compile processes (CompileIn).
  virtual bool compiles_in_processes() const { return false; }
  /// How many candidates may be prepared ahead of the one being measured,
  /// so that work on them (compilation) overlaps the measurement; adaptive
  /// strategies see results with at most this lag.
  virtual std::size_t lookahead() const = 0;
  /// Where the measurements come from when they are not taken now (the
  /// recorded sweep's name), for the run's record; nullopt otherwise.
  virtual std::optional<std::string> origin() const = 0;

  /// Whether the next shape's candidates may be prepared while this shape's
  /// are still being measured: the sweep then calls begin_preparing() and
  /// prepare() for the next shape before this shape's last measure() and
  /// retime(), and that shape's begin_shape() after them.  Off by default.
  virtual bool prepares_across_shapes() const { return false; }
  /// Before the first prepare() of each shape's candidates.
  virtual void begin_preparing(const Shape& shape) { (void)shape; }
  /// Starts work on a candidate that measure() will be asked for later.
  virtual void prepare(const Config& config, const Shape& shape) = 0;
  /// Before the first measurement at a shape that has candidates; may draw
  /// from `rng` (inputs) and add its setup to `report`.  A candidate whose
  /// running median passes `start.factor` × the fastest median measured at
  /// the shape when its timing starts is cut (Cutoff; factor 0: never): the
  /// source keeps that best, since with several GPUs only it knows which
  /// results have come in by then.  It starts from `start.best_us` (an
  /// earlier run's best at the shape; 0: none).
  virtual void begin_shape(const Shape& shape, const Cutoff& start, std::mt19937_64& rng,
                           ShapeReport& report) = 0;
  /// The result of the oldest prepared candidate, which is `config`; time
  /// spent on it goes into `report`.  The sweep sets the report's config
  /// text.  "Cannot run" is an outcome; exceptions are for a broken
  /// environment.
  virtual CandidateReport measure(const Config& config, const Shape& shape, ShapeReport& report) = 0;
  /// Times the ok candidates of the current shape named in `configs` again,
  /// interleaved; one entry each, empty where it could not be re-timed.
  virtual std::vector<std::optional<TimingStats>> retime(const std::vector<std::string>& configs,
                                                         int rounds, ShapeReport& report) = 0;
  /// At the end: NVRTC runs, binaries reused, worker replacements, each
  /// worker's load.
  virtual void add_totals(SweepReport& report) const = 0;
};

/// Where and how candidates are compiled.
struct CompileSettings {
  std::filesystem::path database;  // binaries are cached here
  std::string arch;                // "sm_90"
  unsigned jobs = 0;               // compile threads; 0: one per core
  CompileIn compile_in = CompileIn::threads;  // where NVRTC runs (CompilePool)
};

/// Compiles through a pool and measures in the workers of `workers` (one
/// per GPU, all of one model, each reporting a usable GPU); `space_file` is
/// what the workers load.  Every worker sets up the same inputs (one seed a
/// shape); the fastest few are re-timed on the first worker, so that they
/// are compared on one GPU.  The space must outlive the source.
std::unique_ptr<MeasurementSource> gpu_measurements(const SearchSpace& space,
                                                    const std::filesystem::path& space_file,
                                                    const CompileSettings& compile, const TimingOptions& timing,
                                                    std::unique_ptr<WorkerPool> workers);

/// The same with one worker, lent by the caller (who must not use it while
/// the source exists), which must already report a usable GPU.
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
