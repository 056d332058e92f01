// A tuning sweep: for each shape, the configs a search strategy proposes
// (tuner/strategy.h) within a budget, measured by a MeasurementSource
// (tuner/measurement_source.h: compiled on all cores while the GPU worker
// validates and times the ones already compiled, or replayed), each
// measurement committed to the store as it is produced (a killed sweep loses
// at most the candidate in flight and a restarted one skips what was
// committed), and at the end the fastest few timed again, interleaved, to
// guard against drift.  The same loop compiles without timing
// (run_compile_sweep).  Results come back as values (tuner/sweep_report.h).
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "core/device.h"
#include "core/space.h"
#include "tuner/given_configs.h"
#include "tuner/measurement_source.h"
#include "tuner/shard.h"
#include "tuner/strategy.h"
#include "tuner/sweep_report.h"
#include "tuner/time_budget.h"
#include "tuner/timing.h"

namespace mlatune {

class ReplayData;
class Worker;

struct SweepOptions {
  std::vector<Shape> shapes;
  std::string arch;                         // compile target: the GPU's architecture
  unsigned jobs = 0;                        // compile threads; 0 = one per core
  CompileIn compile_in = CompileIn::threads;  // where NVRTC runs (CompilePool)
  /// Default: the registry's first, auto (resolved per shape: ShapeReport::strategy).
  StrategyKind strategy;
  std::optional<std::uint64_t> max_evals;   // per shape; unset = every valid config
  /// Per shape: no candidate is proposed once this much wall time has gone
  /// since the shape started (those already prepared are still measured);
  /// unset: no limit.
  std::optional<TimeBudget> time_budget;
  /// Strategies that warm-start (bayes, auto where it chooses bayes) first
  /// propose the best configs that the database holds for other shapes of
  /// the kernel on this device when the shape starts (shapes tuned earlier
  /// in this sweep included), repaired to be valid here
  /// (tuner/strategies/warm_start.h).
  bool warm_start = true;
  /// The wall clock the time budget and the reported times read; unset:
  /// std::chrono::steady_clock (a test gives one it controls).
  std::function<std::chrono::steady_clock::time_point()> clock;
  std::optional<std::uint64_t> seed;        // inputs and sampling; unset = fresh
  TimingOptions timing;
  /// A candidate whose running median passes this multiple of the best
  /// median so far at its shape stops being timed (Cutoff); 0: never.  Must
  /// be 0 or above 1, so that a candidate faster than the best is never cut.
  double cutoff_factor = 3.0;
  int retime_top = 5;                       // re-timed interleaved at the end
  int retime_rounds = 3;
  /// Serve times from a recorded sweep instead of a GPU (no compilation,
  /// no worker); `replay_source` names it in the run record.  Read only by
  /// the run_sweep overload that takes a Worker*.
  const ReplayData* replay = nullptr;
  std::string replay_source;
  /// Restricts the candidates to the valid configs of this space, which must
  /// have the same parameters as the swept one (the swept space with extra
  /// constraints: `tune --where`).  Results are still recorded under the
  /// swept space, so the dispatcher uses them.  Null: every valid config.
  const SearchSpace* candidates = nullptr;
  /// Evaluate only this shard's share of the sweep (tuner/shard.h); unset:
  /// all of it.  With a seeded strategy that does not adapt, every shard must
  /// be given the same seed.
  std::optional<Shard> shard;
  /// Evaluate exactly these configs instead of searching (`tune
  /// --configs-file`, `cache revalidate`): no strategy, no default config
  /// first; those invalid at a shape are skipped (ShapeReport::skipped);
  /// `max_evals` still caps each shape.  Unset: search with `strategy`.
  std::optional<GivenConfigs> given;
  /// Called when a shape starts and after every candidate.
  std::function<void(const SweepProgress&)> progress;
  /// Asked before each candidate is measured (and before each shape): once
  /// it answers true, nothing more is proposed or measured, the candidates
  /// prepared but not yet measured are dropped, the fastest are not timed
  /// again, and the run is recorded as interrupted (ShapeReport::interrupted,
  /// SweepReport::interrupted).  What was measured is committed as usual, so
  /// running the same sweep again goes on from there.  Unset: never.
  std::function<bool()> stop_requested;
};

/// Runs the sweep with measurements from `source`, recorded in `database`
/// as one run on `device`.  `space_file` is recorded with the run (made
/// absolute).  InputError for a bad cutoff factor, before anything is written.
SweepReport run_sweep(const SearchSpace& space, const std::filesystem::path& space_file,
                      const std::filesystem::path& database, MeasurementSource& source,
                      const DeviceInfo& device, const SweepOptions& options);

/// The same, with the source chosen from the arguments: `options.replay`
/// when set, else `worker` (which must already report a usable GPU:
/// Worker::probe_device), compiling into `database`.  EnvironmentError when
/// there is neither.
SweepReport run_sweep(const SearchSpace& space, const std::filesystem::path& space_file,
                      const std::filesystem::path& database, Worker* worker,
                      const DeviceInfo& device, const SweepOptions& options);

/// Compiles every valid config (of `options.candidates` when set) at each of
/// `options.shapes` for `options.arch`, in enumeration order, with
/// `options.jobs` threads, and reports each compilation
/// (CandidateReport::compile).  Only the binaries reach `database`: no run,
/// no measurement.  The strategy, budget, seed and timing options are unused.
SweepReport run_compile_sweep(const SearchSpace& space, const std::filesystem::path& database,
                              const SweepOptions& options);

}  // namespace mlatune
