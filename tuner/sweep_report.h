// What a tuning sweep (tuner/sweep.h) produced, as values: per candidate, per
// shape, for the whole sweep, and where the time went.  Printers (the CLI's
// human and JSON summaries) format these; the sweep never prints.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/outcome.h"
#include "core/resource_usage.h"
#include "tuner/evaluator.h"
#include "tuner/given_configs.h"
#include "tuner/timing.h"
#include "tuner/worker/messages.h"

namespace mlatune {

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

/// The compilation behind a candidate (what `tune --compile-only` reports).
struct CompileSummary {
  std::string key;                   // BinaryKey hash
  std::vector<std::string> options;  // NVRTC options
  double seconds = 0;                // NVRTC time of this compilation
  std::size_t cubin_bytes = 0;       // 0 when it failed
  std::string log;                   // NVRTC's log, kept when it failed
};

/// One candidate of this sweep and what became of it.
struct CandidateReport {
  std::string config;
  Outcome outcome = Outcome::ok;
  std::string reason;
  std::optional<TimingStats> timing;
  std::optional<ValidationStats> validation;
  std::optional<ResourceUsage> usage;
  std::optional<CompileSummary> compile;  // set when this sweep compiled it
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
  /// The strategy that searched (auto resolved: "brute_force", "bayes");
  /// empty for given configs.
  std::string strategy;
  /// Configs tuned at other shapes that the strategy was given to propose
  /// first (SweepOptions::warm_start), and how many of them were repaired
  /// to be valid here.
  std::uint64_t warm_start = 0;
  std::uint64_t warm_start_repaired = 0;
  /// Values of name parameters that the strategy's spread-out first configs
  /// left out, as "ALGORITHM=expanded (84x at B=...)" (median over the
  /// fastest at the nearest shape that measured it), their fastest configs
  /// there counted in warm_start (strategies::costly_values).
  std::vector<std::string> costly_values;
  /// The time budget (SweepOptions::time_budget) ended the search here
  /// before the budget of evaluations or the space did.
  bool time_budget_spent = false;
  /// SweepOptions::stop_requested ended the search here (not retimed).
  bool interrupted = false;
  std::uint64_t planned = 0;           // configs this sweep chose to try
  std::uint64_t already_measured = 0;  // of those, skipped: committed earlier
  std::uint64_t other_shards = 0;      // candidates left to the other shards (tuner/shard.h)
  std::map<Outcome, int> outcomes;
  std::vector<CandidateReport> results;  // in evaluation order
  std::vector<RetimedCandidate> retimed; // fastest first
  std::optional<CandidateReport> default_config;  // the space's default, when tried
  std::optional<double> median_ok_us;    // median over the ok configs of this sweep
  std::optional<std::string> best_config;  // the store's best after this sweep
  std::optional<double> best_us;
  WorkloadInfo workload;
  int cut = 0;             // of the ok results, timed with an early cut (TimingStats::cut)
  /// Where the early cut started: the best ok median at the shape from
  /// earlier runs with this cache method (unset: none, the first result).
  std::optional<double> cutoff_start_us;
  /// Wall time from the end of the shape before (or this shape's start) to
  /// this shape's end: the shapes' walls add up to the sweep's.
  double wall_s = 0;
  /// Candidates prepared (compiling) while the shape before was still being
  /// measured or re-timed (MeasurementSource::prepares_across_shapes).
  std::uint64_t prepared_ahead = 0;
  // Worker time, summed over the GPU workers (one, unless `tune --gpus`):
  double gpu_s = 0;        // in the worker: validation, timing, re-timing
  double compile_wait_s = 0;  // a worker idle, waiting for a compilation
  double setup_s = 0;      // setting up the workload (inputs, reference, floor)
  /// NVRTC time of the compilations this shape needed first (a binary shared
  /// with an earlier shape, or loaded from the database, counts nothing):
  /// thread time summed over the compile pool, not wall time.
  double nvrtc_s = 0;
  /// Binaries (successful compilations) this shape used that an earlier
  /// shape of the same sweep had already compiled or loaded: shapes whose
  /// compiled-in variables agree share one binary, compiled once.
  std::uint64_t shared_binaries = 0;
  /// Given configs (SweepOptions::given) that cannot run at this shape.
  std::vector<SkippedConfig> skipped;
};

/// One GPU worker's share of a sweep (several with `tune --gpus`).
struct WorkerLoad {
  std::string label;            // "GPU 1"
  std::uint64_t evaluated = 0;  // candidates it took, every outcome
  double busy_s = 0;            // in evaluate and re-time requests
  int replacements = 0;         // workers started after a crash or hang
};

struct SweepReport {
  DeviceInfo device;
  std::int64_t run_id = 0;  // 0: nothing was recorded (a compile-only sweep)
  std::vector<ShapeReport> shapes;
  /// Stopped by SweepOptions::stop_requested: the last shape is unfinished
  /// and the shapes after it were not started.
  bool interrupted = false;
  double wall_s = 0;
  std::uint64_t nvrtc_runs = 0;
  std::uint64_t binaries_reused = 0;  // from memory or the database
  /// Prologue parts compiled apart (the space's prologue.apart), and the
  /// requests that found theirs compiled already (Compiler::prologue_parts).
  std::uint64_t prologue_parts_compiled = 0;
  std::uint64_t prologue_parts_reused = 0;
  unsigned compile_threads = 0;
  bool compile_processes = false;  // each compile thread ran NVRTC in a process of its own
  int worker_replacements = 0;  // summed over `workers`
  /// The GPU workers, in the order of their GPUs; empty when nothing ran on
  /// a GPU (replayed or compiled only).
  std::vector<WorkerLoad> workers;
};

/// A worker's rates over the sweep's wall time.
struct WorkerTotals {
  WorkerLoad load;
  std::optional<double> configs_per_s;  // load.evaluated / wall
  std::optional<double> busy_fraction;  // load.busy_s / wall: its GPU-busy share
};

WorkerTotals worker_totals(const WorkerLoad& load, double wall_s);

/// A sweep's time split between compilation and the GPU, over all shapes:
/// which of the two bounds the rate.  The parts of the GPU workers' time
/// (gpu_s, compile_wait_s, setup_s, other_s), summed over the workers, do
/// not overlap and add up to workers × wall_s (wall_s with one GPU);
/// nvrtc_s runs on the compile threads alongside them.
struct SweepTotals {
  std::uint64_t evaluated = 0;  // candidates evaluated now, every outcome
  std::uint64_t cut = 0;        // of those, timed with an early cut
  std::uint64_t shapes = 0;
  std::uint64_t shared_binaries = 0;  // summed over shapes: ShapeReport::shared_binaries
  double wall_s = 0;            // the whole sweep, end to end
  unsigned workers = 1;         // GPU workers (1 when none ran)
  double gpu_s = 0;             // GPU workers busy, summed over workers
  double compile_wait_s = 0;    // the GPU side idle, waiting for a compilation
  double setup_s = 0;           // workload setup
  double other_s = 0;           // the rest: store, strategy, re-timing setup, start and end
  double nvrtc_s = 0;           // NVRTC thread time, summed over compilations
  unsigned compile_threads = 0;
  /// End to end: evaluated / wall_s.
  std::optional<double> configs_per_s;
  /// evaluated / gpu_s: the rate if one GPU worker were the only cost.
  std::optional<double> gpu_limit_configs_per_s;
  /// evaluated / (nvrtc_s / compile_threads): the rate if compilation,
  /// spread over every compile thread, were the only cost.
  std::optional<double> compile_limit_configs_per_s;
  /// gpu_s / (workers × wall_s): how busy the GPU workers were kept, on average.
  std::optional<double> gpu_busy_fraction;
  /// Each GPU worker's rate and busy share (empty when none ran).
  std::vector<WorkerTotals> per_worker;
};

SweepTotals sweep_totals(const SweepReport& report);

}  // namespace mlatune
