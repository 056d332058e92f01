// `mlatune tune`'s options as typed values (parsed once, in
// cli/tune_commands.cpp), and the command that runs on them
// (cli/tune_run.cpp).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tuner/compile_pool.h"
#include "tuner/shard.h"
#include "tuner/strategy.h"
#include "tuner/time_budget.h"
#include "tuner/timing.h"
#include "tuner/worker/gpus.h"

namespace mlatune::cli {

struct TuneSettings {
  std::filesystem::path space_file;
  std::filesystem::path database;
  /// Shapes as given (parsed against the space once it is loaded): --shape,
  /// --shapes-file and --grid together, in that order, each shape once; all
  /// empty: the space's default shapes.
  std::vector<std::string> shapes;
  std::vector<std::filesystem::path> shapes_files;
  std::vector<std::string> grids;      // core/shape_grid.h's syntax
  bool misses = false;                 // tune the shapes the dispatcher missed instead
  /// Evaluate exactly the configs of this file at every shape instead of
  /// searching; empty: search with `strategy`.
  std::filesystem::path configs_file;
  bool compile_only = false;
  std::string arch;                    // canonical ("sm_90"); empty: the GPU's, else sm_90
  bool json = false;
  bool quiet = false;
  /// A recorded sweep to serve measurements from: a run id of the database
  /// or a CSV file; empty: measure.
  std::string replay;
  std::vector<std::string> where;      // extra constraints on the candidates
  /// The summary's worst error per input kind, one row per value of this
  /// parameter; empty: one row per shape.
  std::string errors_by;
  unsigned jobs = 0;
  CompileIn compile_in = CompileIn::processes;  // --compile-in
  std::optional<std::uint64_t> max_evals;
  std::optional<TimeBudget> time_budget;  // per shape
  bool warm_start = true;                 // --no-warm-start: false
  std::optional<std::uint64_t> seed;
  StrategyKind strategy;  // the registry's first: auto
  bool strategy_given = false;         // --strategy was on the command line
  TimingOptions timing;                // cache method, budget, cut_min_samples
  double cutoff = 0;
  /// This process's share of the sweep (--shard, else a Slurm job array's
  /// task), and where it came from; unset: the whole sweep.
  std::optional<ShardChoice> shard;
  /// The GPUs to time on, one worker each (--gpus); unset: one worker on the
  /// first GPU this process sees, as without the option.
  std::optional<GpuSelection> gpus;
};

/// Runs `mlatune tune`; errors are thrown (InputError: exit 2).
void run_tune(const TuneSettings& settings);

}  // namespace mlatune::cli
