// A tuning sweep: for each shape, the configs a search strategy proposes
// (tuner/strategy.h) within a budget, compiled on all cores while the GPU
// worker validates and times the ones already compiled, each measurement committed to the store
// as it is produced (a killed sweep loses at most the candidate in flight and
// a restarted one skips what was committed), and at the end the fastest few
// timed again, interleaved, to guard against drift.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tuner/evaluator.h"
#include "core/outcome.h"
#include "core/resource_usage.h"
#include "core/space.h"
#include "tuner/strategy.h"
#include "tuner/timing.h"
#include "tuner/worker/client.h"

namespace mlatune {

class ReplayData;
class Store;

struct SweepOptions {
  std::vector<Shape> shapes;
  std::string arch;                         // compile target: the GPU's architecture
  unsigned jobs = 0;                        // compile threads; 0 = one per core
  StrategyKind strategy = StrategyKind::brute_force;
  std::optional<std::uint64_t> max_evals;   // per shape; unset = every valid config
  std::optional<std::uint64_t> seed;        // inputs and sampling; unset = fresh
  TimingOptions timing;
  /// A candidate whose running median passes this multiple of the best
  /// median so far at its shape stops being timed (Cutoff); 0: never.  Must
  /// be 0 or above 1, so that a candidate faster than the best is never cut.
  double cutoff_factor = 3.0;
  int retime_top = 5;                       // re-timed interleaved at the end
  int retime_rounds = 3;
  /// Serve times from a recorded sweep instead of a GPU (no compilation,
  /// no worker); `replay_source` names it in the run record.
  const ReplayData* replay = nullptr;
  std::string replay_source;
  /// Restricts the candidates to the valid configs of this space, which must
  /// have the same parameters as the swept one (the swept space with extra
  /// constraints: `tune --where`).  Results are still recorded under the
  /// swept space, so the dispatcher uses them.  Null: every valid config.
  const SearchSpace* candidates = nullptr;
  /// Called when a shape starts and after every candidate.
  std::function<void(const struct SweepProgress&)> progress;
};

/// Where a sweep stands, for progress output.
struct SweepProgress {
  std::string shape;
  std::uint64_t done = 0;      // candidates evaluated at this shape in this sweep
  std::uint64_t total = 0;     // candidates this sweep expects to evaluate at this shape
  std::uint64_t failures = 0;  // of `done`, outcomes other than ok
  std::optional<double> best_us;  // fastest ok time so far in this sweep
  double elapsed_s = 0;
  std::string line;            // what just happened, as one line of text
};

/// One candidate of this sweep and what became of it.
struct CandidateReport {
  std::string config;
  Outcome outcome = Outcome::ok;
  std::string reason;
  std::optional<TimingStats> timing;
  std::optional<ValidationStats> validation;
  std::optional<ResourceUsage> usage;
};

struct RetimedCandidate {
  std::string config;
  double first_median_us = 0;  // from the sweep
  TimingStats retimed;         // interleaved, at the end
};

/// One shape of a sweep: what was tried, what became of it, and where the
/// time went.
struct ShapeReport {
  std::string shape;
  std::uint64_t valid_configs = 0;
  std::uint64_t planned = 0;           // configs this sweep chose to try
  std::uint64_t already_measured = 0;  // of those, skipped: committed earlier
  std::map<Outcome, int> outcomes;
  std::vector<CandidateReport> results;  // in evaluation order
  std::vector<RetimedCandidate> retimed; // fastest first
  std::optional<CandidateReport> default_config;  // the space's default, when tried
  std::optional<double> median_ok_us;    // median over the ok configs of this sweep
  std::optional<std::string> best_config;  // the store's best after this sweep
  std::optional<double> best_us;
  WorkloadInfo workload;
  int cut = 0;             // of the ok results, timed with an early cut (TimingStats::cut)
  double wall_s = 0;
  double gpu_s = 0;        // waiting on the worker: validation, timing, re-timing
  double compile_wait_s = 0;  // GPU side idle, waiting for a compilation
  double setup_s = 0;      // setting up the workload (inputs, reference, floor)
  /// NVRTC time of the compilations this shape needed first (a binary shared
  /// with an earlier shape, or loaded from the database, counts nothing):
  /// thread time summed over the compile pool, not wall time.
  double nvrtc_s = 0;
};

struct SweepReport {
  DeviceInfo device;
  std::int64_t run_id = 0;
  std::vector<ShapeReport> shapes;
  double wall_s = 0;
  std::uint64_t nvrtc_runs = 0;
  std::uint64_t binaries_reused = 0;  // from memory or the database
  unsigned compile_threads = 0;
  int worker_replacements = 0;
};

/// A sweep's time split between compilation and the GPU, over all shapes:
/// which of the two bounds the rate.  The parts of the wall time (gpu_s,
/// compile_wait_s, setup_s, other_s) do not overlap and add up to wall_s;
/// nvrtc_s runs on the compile threads alongside them.
struct SweepTotals {
  std::uint64_t evaluated = 0;  // candidates evaluated now, every outcome
  std::uint64_t cut = 0;        // of those, timed with an early cut
  double wall_s = 0;            // the whole sweep, end to end
  double gpu_s = 0;             // waiting on the GPU worker
  double compile_wait_s = 0;    // the GPU side idle, waiting for a compilation
  double setup_s = 0;           // workload setup
  double other_s = 0;           // the rest: store, strategy, re-timing setup, start and end
  double nvrtc_s = 0;           // NVRTC thread time, summed over compilations
  unsigned compile_threads = 0;
  /// End to end: evaluated / wall_s.
  std::optional<double> configs_per_s;
  /// evaluated / gpu_s: the rate if the GPU worker were the only cost.
  std::optional<double> gpu_limit_configs_per_s;
  /// evaluated / (nvrtc_s / compile_threads): the rate if compilation,
  /// spread over every compile thread, were the only cost.
  std::optional<double> compile_limit_configs_per_s;
  /// gpu_s / wall_s: how busy the GPU worker was kept.
  std::optional<double> gpu_busy_fraction;
};

SweepTotals sweep_totals(const SweepReport& report);

/// Runs the sweep.  `space_file` is recorded with the run (made absolute).
/// `worker` must already report a usable GPU (Worker::probe_device); it may
/// be null when `options.replay` serves the measurements.
SweepReport run_sweep(const SearchSpace& space, const std::filesystem::path& space_file,
                      const std::filesystem::path& database, Worker* worker,
                      const DeviceInfo& device, const SweepOptions& options);

}  // namespace mlatune
